// The training curve as a PNG, drawn by gnuplot when it is installed (never required).
#include <cstdio>
#include <cstdlib>

#include "train.h"

namespace mqar {

bool write_plot(const std::string &csv_path, const std::string &png_path, const std::string &title, std::FILE *log) {
    if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
        if (log) std::fprintf(log, "plot: skipped (gnuplot is not on PATH; e.g. apt-get install gnuplot-nox)\n");
        return false;
    }
    std::FILE *gp = popen("gnuplot", "w");
    if (!gp) {
        if (log) std::fprintf(log, "plot: skipped (cannot start gnuplot)\n");
        return false;
    }
    // Training loss on the left axis (log scale), held-out recall accuracy on the right.
    std::fprintf(gp,
                 "set terminal png size 1000,600\n"
                 "set output '%s'\n"
                 "set datafile separator ','\n"
                 "set key right center box opaque\n"
                 "set title \"%s\" noenhanced\n"
                 "set xlabel 'step'\n"
                 "set ylabel 'cross-entropy on query positions'\n"
                 "set logscale y\n"
                 "set y2label 'held-out recall accuracy'\n"
                 "set y2range [0:1.02]\n"
                 "set y2tics 0.1\n"
                 "set ytics nomirror\n"
                 "set grid\n"
                 "plot '%s' using 1:4 skip 1 with lines lw 1 title 'training loss', \\\n"
                 "     '' using 1:(strlen(strcol(7)) > 0 ? column(7) : NaN) skip 1 axes x1y2 with linespoints lw 2 pt 7 "
                 "title 'held-out accuracy'\n",
                 png_path.c_str(), title.c_str(), csv_path.c_str());
    const int rc = pclose(gp);
    if (rc != 0) {
        if (log) std::fprintf(log, "plot: gnuplot failed (status %d)\n", rc);
        return false;
    }
    if (log) std::fprintf(log, "plot: %s\n", png_path.c_str());
    return true;
}

}  // namespace mqar

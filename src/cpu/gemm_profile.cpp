#include "cpu/gemm_profile.h"

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <vector>

#include "cpu/gemm.h"

namespace gdn::cpu {

bool GemmShape::operator<(const GemmShape &o) const {
    auto key = [](const GemmShape &s) {
        return std::make_tuple(s.m, s.n, s.k, s.a_transposed, s.b_transposed, s.c_rows, s.b_rows, s.c_in, s.accumulate);
    };
    return key(*this) < key(o);
}

void GemmProfile::add(const GemmShape &shape, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    Total &t = totals_[shape];
    t.seconds += seconds;
    ++t.calls;
}

std::string GemmProfile::table() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (totals_.empty()) return {};
    std::vector<std::pair<GemmShape, Total>> rows(totals_.begin(), totals_.end());
    std::stable_sort(rows.begin(), rows.end(), [](const auto &x, const auto &y) { return x.second.seconds > y.second.seconds; });
    double all = 0;
    for (const auto &r : rows) all += r.second.seconds;
    char line[200];
    std::snprintf(line, sizeof line, "gdn GEMM profile (%s kernel): %.3f s in calls, summed over threads\n", gemm_isa(), all);
    std::string out = line;
    std::snprintf(line, sizeof line, "  %6s %6s %6s %6s  %c %c  %-6s  %-2s %10s  %18s\n", "share", "m", "n", "k", 'A', 'B',
                  "scales", "C", "calls", "GFLOP/s a thread");
    out += line;
    for (const auto &[s, t] : rows) {
        const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
        const double share = all > 0 ? 100.0 * t.seconds / all : 0.0;
        const double rate = t.seconds > 0 ? flop * static_cast<double>(t.calls) / t.seconds / 1e9 : 0.0;
        const char scales[] = {s.c_rows ? 'r' : '-', s.b_rows ? 'b' : '-', s.c_in ? 'i' : '-', '\0'};
        std::snprintf(line, sizeof line, "  %5.1f%% %6lld %6lld %6lld  %c %c  %-6s  %-2s %10lld  %18.1f\n", share,
                      static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
                      s.a_transposed ? 'T' : 'N', s.b_transposed ? 'T' : 'N', scales, s.accumulate ? "+=" : "=",
                      static_cast<long long>(t.calls), rate);
        out += line;
    }
    return out;
}

namespace {
// Prints the table when the process exits (its destructor runs after main returns).
struct PrintedAtExit {
    GemmProfile profile;
    ~PrintedAtExit() {
        const std::string t = profile.table();
        if (!t.empty()) std::fputs(t.c_str(), stderr);
    }
};
}  // namespace

GemmProfile &gemm_profile() {
    static PrintedAtExit p;
    return p.profile;
}

}  // namespace gdn::cpu

// What gdn-ops prints: one line per case and backend, a summary per backend, and the closing
// line "N passed, N failed"; or the same records as CSV or JSON.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "options.h"

namespace gdn::ops {

enum class Verdict { Pass, Fail, Skip, Info };

struct Record {
    std::string backend, label, group;
    Verdict verdict = Verdict::Info;
    std::string note;                                   // "not supported: ...", failure details
    std::vector<std::pair<std::string, double>> values;  // metrics, in print order
};

class Report {
public:
    Report(Output output, const char *mode) : output_(output), mode_(mode) {}

    // Free text for the console (a heading, a note); ignored for CSV and JSON.
    void say(const std::string &text) const;
    void add(const Record &r);
    // "  CPU: 12/12 tests passed" for the records of one backend.
    void backend_summary(const std::string &backend) const;
    // Prints the closing line (console) or the whole document (CSV, JSON); returns the exit code.
    int finish() const;

private:
    Output output_;
    const char *mode_;
    std::vector<Record> records_;
};

std::string format_values(const std::vector<std::pair<std::string, double>> &values);

}  // namespace gdn::ops

// What gdn-ops prints: one line per case and backend, a summary per backend, and a closing line
// that counts what ran ("N passed, N failed"; perf: "N cases timed, N failed"; support: "N supported,
// N not supported"); or the same records as CSV or JSON.
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
    // "  CPU: 12/12 tests passed" (perf: "  CPU: 6 cases timed, 0 failed") for one backend's records.
    void backend_summary(const std::string &backend) const;
    // Prints the closing line (console) or the whole document (CSV, JSON); returns the exit code.
    int finish() const;
    // Every record added so far, in order.
    const std::vector<Record> &records() const { return records_; }

private:
    struct Counts {
        int passed = 0, failed = 0, skipped = 0;
        int measured = 0;  // Info records of a backend: perf's timed cases, support's supported ones
    };
    Counts count(const std::string *backend) const;  // nullptr: every record
    std::string closing_line(const Counts &n, bool per_backend) const;

    Output output_;
    const char *mode_;
    std::vector<Record> records_;
};

std::string format_values(const std::vector<std::pair<std::string, double>> &values);

}  // namespace gdn::ops

// What gdn-ops prints: one line per case and backend, a summary per backend, and a closing line
// that counts what ran ("N passed, N failed"; perf: "N cases timed, N failed"; support: "N supported,
// N not supported"); or the same records as one CSV table or one JSON document.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "options.h"

namespace gdn::ops {

// Pass and Fail: test and grad; Timed: perf measured the case; Supported: support's dry run took
// it; Skip: the backend does not take the case (any mode).
enum class Verdict { Pass, Fail, Skip, Timed, Supported };

// "OK", "FAIL", "not supported", "timed", "supported": the verdict as every output writes it.
const char *verdict_name(Verdict v);

struct Record {
    std::string backend, label, group;
    Verdict verdict = Verdict::Fail;
    std::string note;                                   // "GDN_ERROR_UNSUPPORTED: ...", failure details
    std::vector<std::pair<std::string, double>> values;  // metrics, in print order
};

class Report {
public:
    // The model's description (--preset, --gguf, --hf-config) becomes the fact "model".
    Report(const Options &o, Mode mode);

    // Free text for the console (a heading, a note); ignored for CSV and JSON.
    void say(const std::string &text) const;
    // A fact about the whole run (the model, the machine's peak): JSON writes it as a member of the
    // document, CSV as a column with the same value on every row; the console has it from say().
    void fact(const std::string &name, const std::string &text);
    void fact(const std::string &name, double number);
    // "  LABEL: VERDICT [BACKEND] metric=value ... note" on the console; kept for CSV and JSON.
    void add(const Record &r);
    // "  CPU: 12/12 tests passed" (perf: "  CPU: 6 cases timed, 0 failed") for one backend's records.
    void backend_summary(const std::string &backend) const;
    // Prints the closing line (console) or the whole document (CSV, JSON); returns the exit code:
    // 1 when a case failed or when nothing ran (no case selected, or every one not supported but in support:
    // said on stderr with `nothing_ran_reason` or the default), 0 otherwise.
    int finish(const std::string &nothing_ran_reason = "") const;
    // Every record added so far, in order.
    const std::vector<Record> &records() const { return records_; }

private:
    struct Counts {
        int passed = 0, failed = 0, skipped = 0;
        int measured = 0;  // perf's timed cases, support's supported ones
    };
    struct Fact {
        std::string name, text;
        double number = 0;
        bool is_number = false;
    };
    Counts count(const std::string *backend) const;  // nullptr: every record
    std::string closing_line(const Counts &n, bool per_backend) const;
    void print_csv() const;
    void print_json(const Counts &n) const;

    Output output_;
    std::string mode_;
    std::string empty_selection_;  // why no case was selected, for "nothing ran"
    std::vector<Fact> facts_;
    std::vector<Record> records_;
};

// The pieces of CSV and JSON every output shares: a field quoted when it must be; a JSON string;
// a number at full precision (%.17g; JSON: null when not finite, CSV: nan, inf, -inf).
std::string csv_field(const std::string &s);
std::string json_string(const std::string &s);
std::string json_number(double x);
std::string csv_number(double x);

}  // namespace gdn::ops

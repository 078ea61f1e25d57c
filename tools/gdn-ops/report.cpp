#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gdn::ops {
namespace {

// Console: three digits are what a person reads; CSV and JSON keep every bit.
std::string console_values(const std::vector<std::pair<std::string, double>> &values) {
    std::string out;
    char buf[96];
    for (const auto &[name, value] : values) {
        std::snprintf(buf, sizeof buf, " %s=%.3g", name.c_str(), value);
        out += buf;
    }
    return out;
}

}  // namespace

const char *verdict_name(Verdict v) {
    switch (v) {
        case Verdict::Pass: return "OK";
        case Verdict::Fail: return "FAIL";
        case Verdict::Skip: return "not supported";
        case Verdict::Timed: return "timed";
        case Verdict::Supported: return "supported";
    }
    return "?";
}

std::string json_string(const std::string &s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\', out += c;
        else if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else out += c;
    }
    return out + "\"";
}

std::string json_number(double x) { return std::isfinite(x) ? csv_number(x) : "null"; }

std::string csv_number(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return buf;
}

std::string csv_field(const std::string &s) {
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string out = "\"";
    for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}

Report::Report(const Options &o, Mode mode)
    : output_(o.output), mode_(mode_name(mode)), empty_selection_(empty_selection_reason(o)) {
    if (o.model) fact("model", o.model->description);
}

void Report::say(const std::string &text) const {
    if (output_ == Output::Console) std::printf("%s\n", text.c_str());
}

void Report::fact(const std::string &name, const std::string &text) { facts_.push_back({name, text, 0, false}); }
void Report::fact(const std::string &name, double number) { facts_.push_back({name, "", number, true}); }

void Report::add(const Record &r) {
    records_.push_back(r);
    if (output_ != Output::Console) return;
    std::printf("  %s: %s [%s]%s%s%s\n", r.label.c_str(), verdict_name(r.verdict), r.backend.c_str(),
                console_values(r.values).c_str(), r.note.empty() ? "" : " ", r.note.c_str());
    std::fflush(stdout);
}

Report::Counts Report::count(const std::string *backend) const {
    Counts n;
    for (const Record &r : records_) {
        if (backend && r.backend != *backend) continue;
        n.passed += r.verdict == Verdict::Pass;
        n.failed += r.verdict == Verdict::Fail;
        n.skipped += r.verdict == Verdict::Skip;
        n.measured += r.verdict == Verdict::Timed || r.verdict == Verdict::Supported;
    }
    return n;
}

std::string Report::closing_line(const Counts &n, bool per_backend) const {
    std::string line;
    if (mode_ == "perf") {
        line = std::to_string(n.measured) + " cases timed, " + std::to_string(n.failed) + " failed";
        if (n.skipped) line += ", " + std::to_string(n.skipped) + " not supported";
    } else if (mode_ == "support") {
        line = std::to_string(n.measured) + " supported, " + std::to_string(n.skipped) + " not supported";
        if (n.failed) line += ", " + std::to_string(n.failed) + " failed";
    } else if (per_backend) {
        line = std::to_string(n.passed) + "/" + std::to_string(n.passed + n.failed) + " tests passed";
        if (n.skipped) line += ", " + std::to_string(n.skipped) + " not supported";
    } else {
        line = std::to_string(n.passed) + " passed, " + std::to_string(n.failed) + " failed";
        if (n.skipped) line += ", " + std::to_string(n.skipped) + " skipped";
    }
    return line;
}

void Report::backend_summary(const std::string &backend) const {
    if (output_ != Output::Console) return;
    const Counts n = count(&backend);
    if (n.passed + n.failed + n.skipped + n.measured == 0) return;
    std::printf("  %s: %s\n", backend.c_str(), closing_line(n, true).c_str());
}

void Report::print_csv() const {
    // A column per metric, in the order the metrics first appear; a record without one leaves it empty.
    std::vector<std::string> metrics;
    for (const Record &r : records_)
        for (const auto &value : r.values)
            if (std::find(metrics.begin(), metrics.end(), value.first) == metrics.end()) metrics.push_back(value.first);
    std::string line = "mode,backend,group,case,verdict,note";
    for (const std::string &m : metrics) line.append(",").append(csv_field(m));
    for (const Fact &f : facts_) line.append(",").append(csv_field(f.name));
    std::printf("%s\n", line.c_str());
    std::string facts;
    for (const Fact &f : facts_) facts.append(",").append(f.is_number ? csv_number(f.number) : csv_field(f.text));
    for (const Record &r : records_) {
        line = mode_ + "," + csv_field(r.backend) + "," + csv_field(r.group) + "," + csv_field(r.label) + "," +
               verdict_name(r.verdict) + "," + csv_field(r.note);
        for (const std::string &m : metrics) {
            line += ",";
            for (const auto &[name, value] : r.values)
                if (name == m) line += csv_number(value);
        }
        std::printf("%s%s\n", line.c_str(), facts.c_str());
    }
}

void Report::print_json(const Counts &n) const {
    std::printf("{\"mode\": %s", json_string(mode_).c_str());
    for (const Fact &f : facts_)
        std::printf(", %s: %s", json_string(f.name).c_str(), (f.is_number ? json_number(f.number) : json_string(f.text)).c_str());
    std::printf(", \"passed\": %d, \"failed\": %d, \"skipped\": %d", n.passed, n.failed, n.skipped);
    if (mode_ == "perf") std::printf(", \"timed\": %d", n.measured);
    if (mode_ == "support") std::printf(", \"supported\": %d", n.measured);
    std::printf(", \"results\": [");
    for (size_t i = 0; i < records_.size(); ++i) {
        const Record &r = records_[i];
        std::printf("%s\n  {\"backend\": %s, \"group\": %s, \"case\": %s, \"verdict\": %s, \"note\": %s, \"metrics\": {", i ? "," : "",
                    json_string(r.backend).c_str(), json_string(r.group).c_str(), json_string(r.label).c_str(),
                    json_string(verdict_name(r.verdict)).c_str(), json_string(r.note).c_str());
        for (size_t j = 0; j < r.values.size(); ++j)
            std::printf("%s%s: %s", j ? ", " : "", json_string(r.values[j].first).c_str(), json_number(r.values[j].second).c_str());
        std::printf("}}");
    }
    std::printf("\n]}\n");
}

int Report::finish(const std::string &nothing_ran_reason) const {
    const Counts n = count(nullptr);
    if (output_ == Output::Console) std::printf("%s\n", closing_line(n, false).c_str());
    else if (output_ == Output::Csv) print_csv();
    else print_json(n);
    std::fflush(stdout);
    // support's "not supported" is an answer; elsewhere a case not taken did not run.
    const int ran = n.passed + n.failed + n.measured + (mode_ == "support" ? n.skipped : 0);
    if (ran == 0) {
        const std::string reason = !nothing_ran_reason.empty() ? nothing_ran_reason
                                   : records_.empty()          ? empty_selection_
                                                               : "no chosen backend takes any of the cases (see gdn-ops support)";
        std::fprintf(stderr, "gdn-ops: nothing ran: %s\n", reason.c_str());
        return 1;
    }
    return n.failed > 0 ? 1 : 0;
}

}  // namespace gdn::ops

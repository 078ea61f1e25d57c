#include "report.h"

#include <cmath>
#include <cstdio>

namespace gdn::ops {
namespace {

const char *verdict_name(Verdict v) {
    switch (v) {
        case Verdict::Pass: return "OK";
        case Verdict::Fail: return "FAIL";
        case Verdict::Skip: return "not supported";
        case Verdict::Info: return "";
    }
    return "";
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

std::string json_number(double x) {
    if (!std::isfinite(x)) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return buf;
}

std::string csv_field(const std::string &s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string out = "\"";
    for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}

}  // namespace

std::string format_values(const std::vector<std::pair<std::string, double>> &values) {
    std::string out;
    char buf[64];
    for (const auto &[name, value] : values) {
        std::snprintf(buf, sizeof buf, "%s%s=%.3g", out.empty() ? "" : " ", name.c_str(), value);
        out += buf;
    }
    return out;
}

void Report::say(const std::string &text) const {
    if (output_ == Output::Console) std::printf("%s\n", text.c_str());
}

void Report::add(const Record &r) {
    records_.push_back(r);
    if (output_ != Output::Console) return;
    if (r.verdict == Verdict::Info) {
        const std::string values = format_values(r.values);
        std::printf("  %s [%s]: %s%s%s\n", r.label.c_str(), r.backend.c_str(), values.c_str(),
                    values.empty() || r.note.empty() ? "" : " ", r.note.c_str());
    } else {
        const std::string values = format_values(r.values);
        std::printf("  %s: %s [%s]%s%s%s%s\n", r.label.c_str(), verdict_name(r.verdict), r.backend.c_str(),
                    values.empty() ? "" : " ", values.c_str(), r.note.empty() ? "" : " ", r.note.c_str());
    }
    std::fflush(stdout);
}

Report::Counts Report::count(const std::string *backend) const {
    Counts n;
    for (const Record &r : records_) {
        if (backend && r.backend != *backend) continue;
        n.passed += r.verdict == Verdict::Pass;
        n.failed += r.verdict == Verdict::Fail;
        n.skipped += r.verdict == Verdict::Skip;
        n.measured += r.verdict == Verdict::Info && r.backend != "host";  // perf: timed; support: supported
    }
    return n;
}

std::string Report::closing_line(const Counts &n, bool per_backend) const {
    const std::string mode = mode_;
    std::string line;
    if (mode == "perf") {
        line = std::to_string(n.measured) + " cases timed, " + std::to_string(n.failed) + " failed";
        if (n.skipped) line += ", " + std::to_string(n.skipped) + " not supported";
    } else if (mode == "support") {
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

int Report::finish() const {
    const Counts n = count(nullptr);
    const int passed = n.passed, failed = n.failed, skipped = n.skipped;
    if (output_ == Output::Console) {
        std::printf("%s\n", closing_line(n, false).c_str());
    } else if (output_ == Output::Csv) {
        std::printf("mode,backend,group,case,verdict,note,metrics\n");
        for (const Record &r : records_)
            std::printf("%s,%s,%s,%s,%s,%s,%s\n", mode_, r.backend.c_str(), r.group.c_str(), csv_field(r.label).c_str(),
                        r.verdict == Verdict::Info ? "" : verdict_name(r.verdict), csv_field(r.note).c_str(),
                        csv_field(format_values(r.values)).c_str());
    } else {
        std::printf("{\"mode\": %s, \"passed\": %d, \"failed\": %d, \"skipped\": %d, ", json_string(mode_).c_str(), passed,
                    failed, skipped);
        if (std::string(mode_) == "perf") std::printf("\"timed\": %d, ", n.measured);
        if (std::string(mode_) == "support") std::printf("\"supported\": %d, ", n.measured);
        std::printf("\"results\": [");
        for (size_t i = 0; i < records_.size(); ++i) {
            const Record &r = records_[i];
            std::printf("%s\n  {\"backend\": %s, \"group\": %s, \"case\": %s, \"verdict\": %s, \"note\": %s", i ? "," : "",
                        json_string(r.backend).c_str(), json_string(r.group).c_str(), json_string(r.label).c_str(),
                        json_string(r.verdict == Verdict::Info ? "" : verdict_name(r.verdict)).c_str(), json_string(r.note).c_str());
            for (const auto &[name, value] : r.values) std::printf(", %s: %s", json_string(name).c_str(), json_number(value).c_str());
            std::printf("}");
        }
        std::printf("\n]}\n");
    }
    return failed > 0 ? 1 : 0;
}

}  // namespace gdn::ops

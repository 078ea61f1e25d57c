// The work of a mode as a flat list of items (one case, one seed, one backend), and the backend
// sessions a worker keeps while it walks them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "case.h"
#include "report.h"
#include "runner.h"

namespace gdn::ops {

struct WorkItem {
    size_t backend = 0;  // index into the mode's backends
    const testkit::Case *c = nullptr;
    int rep = 0;         // --repeat index: the seed is the run's seed + rep
};

// Every case (times `repeat`) on every backend, backend by backend.
inline std::vector<WorkItem> work_items(size_t backends, const std::vector<testkit::Case> &cases, int repeat) {
    std::vector<WorkItem> out;
    for (size_t b = 0; b < backends; ++b)
        for (const testkit::Case &c : cases)
            for (int rep = 0; rep < repeat; ++rep) out.push_back({b, &c, rep});
    return out;
}

// The session of the backend a worker is on: started at its first item, kept for the next
// items of the same backend. A backend that cannot start is reported once, at its first item
// (record "backend start"), and its other items report nothing.
class SessionCache {
public:
    SessionCache(int threads, int chunk_size) : threads_(threads), chunk_size_(chunk_size) {}

    // The session for `spec`, or nullptr; `failure` is set at the first item of a backend
    // that cannot start.
    testkit::BackendSession *get(const testkit::BackendSpec &spec, std::optional<Record> &failure,
                                 Verdict verdict_if_not_started = Verdict::Fail) {
        if (label_ != spec.label) {
            session_.reset();
            label_ = spec.label;
            session_ = std::make_unique<testkit::BackendSession>(spec, threads_, chunk_size_);
            if (!session_->ok()) failure = Record{spec.label, "backend start", "", verdict_if_not_started,
                                                  "cannot start: " + session_->error(), {}};
        }
        return session_->ok() ? session_.get() : nullptr;
    }

private:
    int threads_, chunk_size_;
    std::string label_;
    std::unique_ptr<testkit::BackendSession> session_;
};

}  // namespace gdn::ops

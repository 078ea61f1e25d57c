// The process's CPU time: every thread's, the ones spinning at a barrier or waiting for work
// included (a worker process's: where gdn-ops runs its cases).
#pragma once

#include <ctime>

namespace gdn::testkit {

inline double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace gdn::testkit

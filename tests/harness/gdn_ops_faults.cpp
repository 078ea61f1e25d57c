// gdn-ops with a planted fault, for the tests of its crash isolation. GDN_OPS_FAULT =
// "KIND:BACKEND:REGEX" makes every case whose label matches REGEX, run on BACKEND, misbehave
// right after the op returns, as a broken backend would:
//   segv     the process dies of SIGSEGV
//   abort    the process aborts
//   exit     the process calls exit(7) (code under test that gives up)
//   guard    16 bytes written past the end of the case's main output, inside its guard zone:
//            the case must fail with the stray write, and its worker is replaced
//   overrun  256 bytes written there: through the guard zone into whatever the heap holds
//            next (the process may die in the case or report the stray write)
//   apart    every call of a case but its first adds 1 to the first element of the main output:
//            a packed case's own call agrees with REF, its sequences called apart do not
//   gathered every call of a case without a pool adds 1 there: a pooled case's own call agrees
//            with REF, the same call on its states gathered into a plain batch does not
//   input    the lowest bit of k's first element (an input) is flipped after the call: the
//            outputs agree with REF, but a backend must leave its inputs as they were
// Without GDN_OPS_FAULT it is gdn-ops.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>

#include "modes.h"
#include "runner.h"

namespace {

std::string g_kind, g_backend;
std::regex g_pattern;
std::string g_last_label;  // apart: the case of the previous call

void misbehave(const gdn::testkit::Case &c, const gdn::testkit::BackendSession &session, const gdn_tensor &t,
               const gdn_tensor &k) {
    if (session.spec().label != g_backend || !std::regex_search(c.label(), g_pattern)) return;
    if (g_kind == "segv") std::raise(SIGSEGV);
    if (g_kind == "abort") std::abort();
    if (g_kind == "exit") std::exit(7);
    if ((g_kind == "guard" || g_kind == "overrun") && session.memory().is_host()) {
        int64_t end = t.nb[0];
        for (int d = 0; d < 4; ++d) end += (t.ne[d] - 1) * t.nb[d];
        std::memset(static_cast<char *>(t.data) + end, 0x5A, g_kind == "guard" ? 16 : 256);
    }
    if (g_kind == "gathered" && !c.pooled() && session.memory().is_host()) *static_cast<float *>(t.data) += 1.0f;
    if (g_kind == "input" && session.memory().is_host()) *static_cast<uint8_t *>(k.data) ^= 1;  // (little-endian)
    if (g_kind == "apart" && session.memory().is_host()) {
        if (c.label() == g_last_label) *static_cast<float *>(t.data) += 1.0f;
        g_last_label = c.label();
    }
}

}  // namespace

int main(int argc, char **argv) {
    if (const char *spec = std::getenv("GDN_OPS_FAULT")) {
        const std::string s = spec;
        const size_t a = s.find(':'), b = a == std::string::npos ? a : s.find(':', a + 1);
        if (b == std::string::npos) {
            std::fprintf(stderr, "GDN_OPS_FAULT: expected KIND:BACKEND:REGEX, got \"%s\"\n", spec);
            return 2;
        }
        g_kind = s.substr(0, a);
        g_backend = s.substr(a + 1, b - a - 1);
        g_pattern = std::regex(s.substr(b + 1));
        gdn::testkit::after_call_hook = misbehave;
    }
    return gdn::ops::run_command_line(argc, argv);
}

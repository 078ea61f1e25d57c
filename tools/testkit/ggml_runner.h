// The forward as a ggml graph on ggml's CPU backend, on a harness problem: ggml's own
// ggml_gated_delta_net (gdn-ops backend GGML) or gdn's drop-in gdn_ggml_gated_delta_net
// (GGML-GDN). Built only with the ggml integration (make_ggml_runner says so otherwise).
#pragma once

#include <memory>
#include <string>

#include "gdn/gdn.h"

namespace gdn::testkit {

enum class GgmlOp { Upstream, Gdn };

class GgmlRunner {
public:
    virtual ~GgmlRunner() = default;
    // Whether the op takes the problem: gdn's validation, then ggml's limits (F32, tiled heads,
    // the scale fixed at 1/sqrt(Sv); upstream: Sk == Sv). GDN_ERROR_UNSUPPORTED / TYPE name them.
    virtual gdn_status check(const gdn_problem &p, const gdn_tensor *out, const gdn_tensor *states, std::string &why) = 0;
    // Builds the graph (kept while the problem's tensors stay the same), computes it on a
    // persistent ggml thread pool, and copies the packed result into out and states.
    virtual gdn_status forward(const gdn_problem &p, const gdn_tensor *out, const gdn_tensor *states, std::string &why) = 0;
    // Seconds the last forward spent in ggml_graph_compute (without building and copying), wall
    // clock and the process's CPU time over that same span.
    virtual double last_compute_seconds() const = 0;
    virtual double last_compute_cpu_seconds() const = 0;
};

// Whether this build has the ggml integration.
bool ggml_runner_built();
// nullptr (with why) when this build has no ggml integration.
std::unique_ptr<GgmlRunner> make_ggml_runner(GgmlOp op, int n_threads, std::string &why);

}  // namespace gdn::testkit

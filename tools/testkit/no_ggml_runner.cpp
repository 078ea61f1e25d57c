#include "ggml_runner.h"

namespace gdn::testkit {

bool ggml_runner_built() { return false; }

std::unique_ptr<GgmlRunner> make_ggml_runner(GgmlOp, int, std::string &why) {
    why = "this build has no ggml integration (configure with -DGDN_GGML_DIR=$(scripts/setup-ggml.sh))";
    return nullptr;
}

}  // namespace gdn::testkit

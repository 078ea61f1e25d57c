// Compiled when libgdn is built without CUDA (GDN_CUDA=OFF or no nvcc): the name is known,
// the backend cannot start.
#include "core/backend.h"

namespace gdn {

Status make_cuda_backend(const gdn_context_params &, std::unique_ptr<Backend> &) {
    return fail(GDN_ERROR_BACKEND, "this libgdn was built without the CUDA backend (configure with -DGDN_CUDA=ON)");
}

}  // namespace gdn

// Placeholder until the chunked cpu backend lands: the name is known, the backend is not built.
#include "core/backend.h"

namespace gdn {

Status make_cpu_backend(const gdn_context_params &, std::unique_ptr<Backend> &) {
    return fail(GDN_ERROR_BACKEND, "the cpu backend is not built into this libgdn yet");
}

}  // namespace gdn

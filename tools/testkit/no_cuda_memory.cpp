// Compiled when libgdn has no CUDA backend.
#include "memory.h"

namespace gdn::testkit {

std::unique_ptr<Memory> make_cuda_memory(int, std::string &why) {
    why = "built without CUDA";
    return nullptr;
}

}  // namespace gdn::testkit

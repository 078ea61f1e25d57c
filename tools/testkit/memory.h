// Where a harness run keeps its tensors: host memory (ref, cpu) or a CUDA device (cuda).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace gdn::testkit {

class Memory {
public:
    virtual ~Memory() = default;
    virtual bool is_host() const = 0;
    virtual void *allocate(size_t bytes) = 0;  // throws std::runtime_error on failure
    virtual void release(void *p) = 0;
    virtual void upload(void *dst, const void *src, size_t bytes) = 0;
    virtual void download(void *dst, const void *src, size_t bytes) = 0;
    virtual void synchronize() {}
};

Memory &host_memory();
// A CUDA device's memory, or nullptr (with `why`) when this build has no CUDA or no device.
std::unique_ptr<Memory> make_cuda_memory(int device, std::string &why);

}  // namespace gdn::testkit

#include "memory.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace gdn::testkit {
namespace {

class HostMemory final : public Memory {
public:
    bool is_host() const override { return true; }
    void *allocate(size_t bytes) override {
        void *p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!p) throw std::bad_alloc();
        return p;
    }
    void release(void *p) override { std::free(p); }
    void upload(void *dst, const void *src, size_t bytes) override { std::memcpy(dst, src, bytes); }
    void download(void *dst, const void *src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

}  // namespace

Memory &host_memory() {
    static HostMemory memory;
    return memory;
}

}  // namespace gdn::testkit

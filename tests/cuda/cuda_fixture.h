// Shared pieces of the cuda tests: random problems held on the host and mirrored on the
// device, run through the public C API on ref (host) and cuda (device) and compared.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "gdn/gdn.h"

namespace gdn_cuda_test {

// Skips the calling test when this machine has no usable CUDA device.
#define GDN_SKIP_WITHOUT_CUDA()                                                              \
    do {                                                                                     \
        std::string why_;                                                                    \
        if (!::gdn_cuda_test::device_available(why_)) GTEST_SKIP() << why_;                  \
    } while (0)

bool device_available(std::string &why);

// A float buffer on the host with a mirror on the device of the same size.
class Mirror {
public:
    explicit Mirror(size_t count, float fill = 0.0f);
    ~Mirror();
    Mirror(const Mirror &) = delete;
    Mirror &operator=(const Mirror &) = delete;

    std::vector<float> host;
    float *device = nullptr;
    void upload();
    void download();
};

// A tensor described once, with its host and device views into one Mirror.
struct Tensor {
    std::shared_ptr<Mirror> buffer;
    gdn_tensor host{}, device{};
    bool present() const { return buffer != nullptr; }
};

// Contiguous [ne0, ne1, ne2, ne3] F32 tensor in its own buffer, filled with `fill`.
Tensor make_tensor(int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, float fill = 0.0f);
// Same shape with one float of padding after every row (outer strides not multiples of rows).
Tensor make_padded_tensor(int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, float fill = 0.0f);

struct Case {
    int Sk = 32, Sv = 32, Hk = 1, Hv = 1;
    int64_t T = 8;
    int B = 1, Bq = 1;
    int K = 1;              // snapshot slots of states / d_states
    bool per_channel = false;  // KDA gate
    bool grouped = false;
    bool with_s0 = true;
    bool packed_qkv = false;   // q, k, v views into one [conv_dim, T, B] buffer (needs B == Bq)
    float g_lo = -0.3f, g_hi = -0.02f;
    uint32_t seed = 1;
    std::string name() const;
};
inline void PrintTo(const Case &c, std::ostream *os) { *os << c.name(); }

// The inputs of a case, filled with reproducible random values (k rows L2-normalised).
struct Problem {
    Case c;
    Tensor q, k, v, g, beta, s0;
    std::vector<std::shared_ptr<Mirror>> buffers;
    gdn_problem host() const;
    gdn_problem device() const;
};
Problem make_problem(const Case &c);

// NMSE sum((a-b)^2)/sum(b^2) over the elements of a tensor (host views), or a huge value when
// an element of a is not finite where b is.
double nmse(const gdn_tensor &a, const gdn_tensor &b);

// Contexts.
struct ContextDeleter {
    void operator()(gdn_context *c) const { gdn_context_free(c); }
};
using Context = std::unique_ptr<gdn_context, ContextDeleter>;
// chunk_size 1 on cuda: the per-token kernels only.
Context make_context(const char *backend, void *stream = nullptr, int chunk_size = 0);

}  // namespace gdn_cuda_test

// Serving on the cuda backend through the C API, against ref: packed decode batches (T = 1 and
// 4 per request) and a mixed prefill + decode batch reading and writing a state pool in place
// (slots unordered, with gaps, negative indices), value-major pools (PyTorch's [slots, H, K, V])
// and key-major ones giving the same bits, an empty sequence's state moved between layouts.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#include "cuda_fixture.h"

namespace gdn_cuda_test {
namespace {

gdn_tensor index_tensor(const std::vector<int64_t> &values) {  // host memory: the backend reads it there
    gdn_tensor t{};
    t.data = const_cast<int64_t *>(values.data());
    t.type = GDN_TYPE_I64;
    t.ne[0] = static_cast<int64_t>(values.size());
    t.ne[1] = t.ne[2] = t.ne[3] = 1;
    t.nb[0] = 8;
    t.nb[1] = t.nb[2] = t.nb[3] = 8 * t.ne[0];
    return t;
}

float &element(const gdn_tensor &t, int64_t i, int64_t j, int64_t h, int64_t n) {
    return *reinterpret_cast<float *>(static_cast<char *>(t.data) + i * t.nb[0] + j * t.nb[1] + h * t.nb[2] + n * t.nb[3]);
}

// A state pool [Sk, Sv, Hv, slots], key-major or value-major (a contiguous [Sv, Sk, Hv, slots]
// with dims 0 and 1 swapped), random values (seed; the same element by element in both
// layouts) or `fill`.
Tensor make_pool(int Sk, int Sv, int Hv, int64_t slots, bool value_major, uint32_t seed, float fill = 0.0f) {
    Tensor t = value_major ? make_tensor(Sv, Sk, Hv, slots, fill) : make_tensor(Sk, Sv, Hv, slots, fill);
    if (value_major)
        for (gdn_tensor *x : {&t.host, &t.device}) {
            std::swap(x->ne[0], x->ne[1]);
            std::swap(x->nb[0], x->nb[1]);
        }
    if (seed != 0) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> unit(-0.5f, 0.5f);
        for (int64_t n = 0; n < slots; ++n)
            for (int h = 0; h < Hv; ++h)
                for (int j = 0; j < Sv; ++j)
                    for (int i = 0; i < Sk; ++i) element(t.host, i, j, h, n) = unit(rng);
    }
    t.buffer->upload();
    return t;
}

// Every element of two state tensors (any layouts) the same bits.
void expect_same_state(const gdn_tensor &a, const gdn_tensor &b) {
    for (int64_t n = 0; n < a.ne[3]; ++n)
        for (int64_t h = 0; h < a.ne[2]; ++h)
            for (int64_t j = 0; j < a.ne[1]; ++j)
                for (int64_t i = 0; i < a.ne[0]; ++i) {
                    const float x = element(a, i, j, h, n), y = element(b, i, j, h, n);
                    if (std::memcmp(&x, &y, sizeof x) != 0) {
                        ADD_FAILURE() << "state (" << i << ", " << j << ", " << h << ", " << n << "): " << x << " vs " << y;
                        return;
                    }
                }
}

// NMSE over a state tensor in any layout against another.
double state_nmse(const gdn_tensor &a, const gdn_tensor &b) {
    double num = 0, den = 0;
    for (int64_t n = 0; n < a.ne[3]; ++n)
        for (int64_t h = 0; h < a.ne[2]; ++h)
            for (int64_t j = 0; j < a.ne[1]; ++j)
                for (int64_t i = 0; i < a.ne[0]; ++i) {
                    const double x = element(a, i, j, h, n), y = element(b, i, j, h, n);
                    num += (x - y) * (x - y);
                    den += y * y;
                }
    return den > 0 ? num / den : num;
}

// A packed batch reading and writing one pool in place.
struct Batch {
    Case c;                        // T = all tokens
    std::vector<int64_t> lengths;  // per request
    std::vector<int64_t> slots;    // per request (-1: none)
    int64_t pool = 0;
    bool value_major = false;
};

std::vector<int64_t> offsets_of(const std::vector<int64_t> &lengths) {
    std::vector<int64_t> offsets{0};
    for (int64_t len : lengths) offsets.push_back(offsets.back() + len);
    return offsets;
}

// Slots of `pool` shuffled, the first `count` named, every fifth of those negative.
std::vector<int64_t> scattered_slots(int64_t count, int64_t pool, uint32_t seed) {
    std::vector<int64_t> all(static_cast<size_t>(pool));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), std::mt19937(seed));
    all.resize(static_cast<size_t>(count));
    for (size_t i = 0; i < all.size(); i += 5) all[i] = -1;
    return all;
}

Batch batch(int Sk, int Sv, int Hk, int Hv, std::vector<int64_t> lengths, int64_t pool, bool value_major) {
    Batch b;
    b.lengths = std::move(lengths);
    b.c.Sk = Sk, b.c.Sv = Sv, b.c.Hk = Hk, b.c.Hv = Hv;
    b.c.T = offsets_of(b.lengths).back();
    b.c.B = b.c.Bq = 1;
    b.c.with_s0 = false;
    b.c.seed = static_cast<uint32_t>(b.lengths.size() * 7 + pool);
    b.slots = scattered_slots(static_cast<int64_t>(b.lengths.size()), pool, b.c.seed);
    b.pool = pool;
    b.value_major = value_major;
    return b;
}

// The forward on ref (host) and cuda (device), the pool updated in place; returns cuda's pool
// and checks out and the pool against ref's, unnamed slots untouched.
Tensor check_forward(const Batch &b) {
    const Case &c = b.c;
    const Problem p = make_problem(c);
    const std::vector<int64_t> offsets = offsets_of(b.lengths);
    Tensor ref_pool = make_pool(c.Sk, c.Sv, c.Hv, b.pool, b.value_major, 99), gpu_pool = make_pool(c.Sk, c.Sv, c.Hv, b.pool, b.value_major, 99);
    Tensor ref_out = make_tensor(c.Sv, c.Hv, c.T, 1, -7.0f), gpu_out = make_tensor(c.Sv, c.Hv, c.T, 1, -7.0f);

    Context ref = make_context("ref"), gpu = make_context("cuda");
    gdn_problem host = p.host(), device = p.device();
    host.cu_seqlens = device.cu_seqlens = index_tensor(offsets);
    host.state_indices = device.state_indices = index_tensor(b.slots);
    host.state = ref_pool.host, device.state = gpu_pool.device;
    EXPECT_EQ(gdn_forward(ref.get(), &host, &ref_out.host, &ref_pool.host), GDN_OK) << gdn_last_error(ref.get());
    EXPECT_EQ(gdn_forward(gpu.get(), &device, &gpu_out.device, &gpu_pool.device), GDN_OK) << gdn_last_error(gpu.get());
    gpu_out.buffer->download();
    gpu_pool.buffer->download();
    EXPECT_LT(nmse(gpu_out.host, ref_out.host), 1e-10);
    EXPECT_LT(state_nmse(gpu_pool.host, ref_pool.host), 1e-10);
    const Tensor original = make_pool(c.Sk, c.Sv, c.Hv, b.pool, b.value_major, 99);
    for (int64_t slot = 0; slot < b.pool; ++slot)
        if (std::find(b.slots.begin(), b.slots.end(), slot) == b.slots.end()) {
            gdn_tensor a = gpu_pool.host, o = original.host;
            a.ne[3] = o.ne[3] = 1;
            a.data = static_cast<char *>(a.data) + slot * a.nb[3];
            o.data = static_cast<char *>(o.data) + slot * o.nb[3];
            expect_same_state(a, o);
        }
    return gpu_pool;
}

TEST(CudaServing, DecodeBatchesUpdateAPoolInPlace) {
    GDN_SKIP_WITHOUT_CUDA();
    for (bool value_major : {false, true}) {
        SCOPED_TRACE(value_major ? "value-major pool" : "key-major pool");
        check_forward(batch(128, 128, 4, 8, std::vector<int64_t>(64, 1), 80, value_major));  // 64 requests, T = 1
        check_forward(batch(128, 128, 4, 8, std::vector<int64_t>(64, 4), 70, value_major));  // 64 requests, T = 4
        check_forward(batch(64, 32, 2, 2, std::vector<int64_t>(1, 1), 3, value_major));
    }
}

TEST(CudaServing, BothLayoutsGiveTheSameBits) {
    GDN_SKIP_WITHOUT_CUDA();
    for (const std::vector<int64_t> &lengths : {std::vector<int64_t>(16, 1), std::vector<int64_t>{300, 1, 2, 1, 4}}) {
        Batch b = batch(128, 128, 2, 4, lengths, 24, false);
        const Tensor key_major = check_forward(b);
        b.value_major = true;
        const Tensor value_major = check_forward(b);
        expect_same_state(value_major.host, key_major.host);
    }
}

TEST(CudaServing, MixedPrefillAndDecodeBackward) {
    GDN_SKIP_WITHOUT_CUDA();
    for (bool value_major : {false, true}) {
        SCOPED_TRACE(value_major ? "value-major pools" : "key-major pools");
        const Batch b = batch(128, 128, 2, 4, {1, 200, 3, 1, 1, 4, 1, 70}, 12, value_major);
        check_forward(b);
        const Case &c = b.c;
        const Problem p = make_problem(c);
        const std::vector<int64_t> offsets = offsets_of(b.lengths);
        const Tensor s0 = make_pool(c.Sk, c.Sv, c.Hv, b.pool, value_major, 11), d_states = make_pool(c.Sk, c.Sv, c.Hv, b.pool, value_major, 12);
        Tensor d_out = make_tensor(c.Sv, c.Hv, c.T, 1);
        std::mt19937 rng(13);
        std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
        for (float &x : d_out.buffer->host) x = unit(rng);
        d_out.buffer->upload();
        struct Grads {
            Tensor dq, dk, dv, dg, dbeta, ds0;
        };
        const auto make_grads = [&] {
            return Grads{make_tensor(c.Sk, c.Hk, c.T, 1, -7.0f), make_tensor(c.Sk, c.Hk, c.T, 1, -7.0f),
                         make_tensor(c.Sv, c.Hv, c.T, 1, -7.0f), make_tensor(1, c.Hv, c.T, 1, -7.0f),
                         make_tensor(1, c.Hv, c.T, 1, -7.0f),     make_pool(c.Sk, c.Sv, c.Hv, b.pool, value_major, 0, -7.0f)};
        };
        Grads want = make_grads(), got = make_grads();
        Context ref = make_context("ref"), gpu = make_context("cuda");
        gdn_problem host = p.host(), device = p.device();
        host.cu_seqlens = device.cu_seqlens = index_tensor(offsets);
        host.state_indices = device.state_indices = index_tensor(b.slots);
        host.state = s0.host, device.state = s0.device;
        const gdn_grads want_grads{want.dq.host, want.dk.host, want.dv.host, want.dg.host, want.dbeta.host, want.ds0.host};
        const gdn_grads got_grads{got.dq.device, got.dk.device, got.dv.device, got.dg.device, got.dbeta.device, got.ds0.device};
        ASSERT_EQ(gdn_backward(ref.get(), &host, &d_out.host, &d_states.host, &want_grads), GDN_OK) << gdn_last_error(ref.get());
        ASSERT_EQ(gdn_backward(gpu.get(), &device, &d_out.device, &d_states.device, &got_grads), GDN_OK) << gdn_last_error(gpu.get());
        for (Tensor *t : {&got.dq, &got.dk, &got.dv, &got.dg, &got.dbeta, &got.ds0}) t->buffer->download();
        EXPECT_LT(nmse(got.dq.host, want.dq.host), 1e-9);
        EXPECT_LT(nmse(got.dk.host, want.dk.host), 1e-9);
        EXPECT_LT(nmse(got.dv.host, want.dv.host), 1e-9);
        EXPECT_LT(nmse(got.dg.host, want.dg.host), 1e-9);
        EXPECT_LT(nmse(got.dbeta.host, want.dbeta.host), 1e-9);
        EXPECT_LT(state_nmse(got.ds0.host, want.ds0.host), 1e-9);
    }
}

// A request with no tokens: its state moves from a value-major s0 to key-major states (and back).
TEST(CudaServing, EmptySequenceStateMovesBetweenLayouts) {
    GDN_SKIP_WITHOUT_CUDA();
    Case c;
    c.Sk = 64, c.Sv = 32, c.Hk = 1, c.Hv = 2, c.T = 3, c.B = c.Bq = 1, c.with_s0 = false;
    const Problem p = make_problem(c);
    const std::vector<int64_t> offsets{0, 2, 2, 3};  // sequence 1 is empty
    for (bool s0_value_major : {true, false}) {
        const Tensor s0 = make_pool(c.Sk, c.Sv, c.Hv, 3, s0_value_major, 21);
        Tensor ref_states = make_pool(c.Sk, c.Sv, c.Hv, 3, !s0_value_major, 0, -7.0f);
        Tensor gpu_states = make_pool(c.Sk, c.Sv, c.Hv, 3, !s0_value_major, 0, -7.0f);
        Context ref = make_context("ref"), gpu = make_context("cuda");
        gdn_problem host = p.host(), device = p.device();
        host.cu_seqlens = device.cu_seqlens = index_tensor(offsets);
        host.state = s0.host, device.state = s0.device;
        ASSERT_EQ(gdn_forward(ref.get(), &host, nullptr, &ref_states.host), GDN_OK) << gdn_last_error(ref.get());
        ASSERT_EQ(gdn_forward(gpu.get(), &device, nullptr, &gpu_states.device), GDN_OK) << gdn_last_error(gpu.get());
        gpu_states.buffer->download();
        gdn_tensor got = gpu_states.host, want = ref_states.host;  // slot 1: the copy, exact
        got.ne[3] = want.ne[3] = 1;
        got.data = static_cast<char *>(got.data) + got.nb[3];
        want.data = static_cast<char *>(want.data) + want.nb[3];
        expect_same_state(got, want);
        EXPECT_LT(state_nmse(gpu_states.host, ref_states.host), 1e-10);
    }
}

}  // namespace
}  // namespace gdn_cuda_test

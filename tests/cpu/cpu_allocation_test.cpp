// A decoding call allocates nothing once the context has run a call of the same size: decoding
// makes a call per token and layer (with state pools, one per sequence inside), each of them a
// run of the thread pool. Counted by replacing the global operator new in this program (not
// under the sanitizers, which bring their own).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "cpu/thread_pool.h"
#include "gdn/gdn.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GDN_COUNTS_ALLOCATIONS 0
#else
#define GDN_COUNTS_ALLOCATIONS 1
namespace {
std::atomic<int64_t> allocations{0};
}
void *operator new(std::size_t n) {
    allocations.fetch_add(1, std::memory_order_relaxed);
    if (void *p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
#endif

namespace {

TEST(CpuAllocation, ThreadPoolRunsAllocateNothingAfterTheFirst) {
#if !GDN_COUNTS_ALLOCATIONS
    GTEST_SKIP() << "the sanitizers replace operator new";
#else
    // A pooled decoding call at the 27B shape: 16 sequences x 48 heads of equal weight.
    for (int threads : {1, 2, 3}) {
        gdn::cpu::ThreadPool pool(threads);
        const std::vector<int64_t> weights(16 * 48, 9);
        std::vector<int64_t> seen(weights.size(), 0);
        const auto body = [&](int64_t i, int) { ++seen[static_cast<size_t>(i)]; };
        pool.run_weighted(weights, body);
        pool.run(static_cast<int64_t>(weights.size()), body);
        const int64_t before = allocations.load();
        for (int call = 0; call < 20; ++call) {
            pool.run_weighted(weights, body);
            pool.run(static_cast<int64_t>(weights.size()), body);
        }
        EXPECT_EQ(allocations.load() - before, 0) << threads << " threads";
        for (int64_t n : seen) ASSERT_EQ(n, 42);
    }
#endif
}

// Host tensors for a decoding step of B sequences: q, k, v, g, beta, out, and the states
// value-major in a pool of 2B slots named by state_indices (pooled) or packed one token per
// sequence (cu_seqlens, key-major states [Sk, Sv, Hv, B]).
struct DecodeStep {
    static constexpr int64_t Sk = 32, Sv = 32, Hk = 2, Hv = 4, B = 16;
    std::vector<float> q, k, v, g, beta, out, states;
    std::vector<int32_t> indices, offsets;
    gdn_problem p{};
    gdn_tensor out_t{};

    static gdn_tensor tensor(std::vector<float> &data, int64_t n0, int64_t n1, int64_t n2, int64_t n3, float value) {
        data.assign(static_cast<size_t>(n0 * n1 * n2 * n3), value);
        const int64_t f = sizeof(float);
        return {data.data(), GDN_TYPE_F32, {n0, n1, n2, n3}, {f, n0 * f, n0 * n1 * f, n0 * n1 * n2 * f}};
    }

    explicit DecodeStep(bool pooled) {
        const int64_t T = pooled ? 1 : B, batch = pooled ? B : 1;  // packed: B tokens of one batch entry
        p.q = tensor(q, Sk, Hk, T, batch, 0.1f);
        p.k = tensor(k, Sk, Hk, T, batch, 0.2f);
        p.v = tensor(v, Sv, Hv, T, batch, 0.3f);
        p.g = tensor(g, 1, Hv, T, batch, -0.1f);
        p.beta = tensor(beta, 1, Hv, T, batch, 0.5f);
        out_t = tensor(out, Sv, Hv, T, batch, 0);
        if (pooled) {
            p.state = tensor(states, Sk, Sv, Hv, 2 * B, 0.01f);
            p.state.nb[1] = sizeof(float);  // value-major: nb = [Sv * 4, 4, ...]
            p.state.nb[0] = Sv * p.state.nb[1];
            for (int64_t n = 0; n < B; ++n) indices.push_back(static_cast<int32_t>(2 * B - 2 - 2 * n));
            p.state_indices = {indices.data(), GDN_TYPE_I32, {B, 1, 1, 1}, {4, 4 * B, 4 * B, 4 * B}};
        } else {
            p.state = tensor(states, Sk, Sv, Hv, B, 0.01f);
            for (int64_t n = 0; n <= B; ++n) offsets.push_back(static_cast<int32_t>(n));
            p.cu_seqlens = {offsets.data(), GDN_TYPE_I32, {B + 1, 1, 1, 1}, {4, 4 * (B + 1), 4 * (B + 1), 4 * (B + 1)}};
        }
    }
};

TEST(CpuAllocation, DecodingCallsAllocateNothingAfterTheFirst) {
#if !GDN_COUNTS_ALLOCATIONS
    GTEST_SKIP() << "the sanitizers replace operator new";
#else
    for (bool pooled : {true, false})
        for (int threads : {1, 2}) {
            gdn_context_params params = gdn_context_default_params();
            params.n_threads = threads;
            gdn_context *ctx = nullptr;
            ASSERT_EQ(gdn_context_create("cpu", &params, &ctx), GDN_OK);
            DecodeStep step(pooled);
            // The states updated in place, as a serving framework's cache is.
            ASSERT_EQ(gdn_forward(ctx, &step.p, &step.out_t, &step.p.state), GDN_OK) << gdn_last_error(ctx);
            const int64_t before = allocations.load();
            for (int call = 0; call < 20; ++call) ASSERT_EQ(gdn_forward(ctx, &step.p, &step.out_t, &step.p.state), GDN_OK);
            EXPECT_EQ(allocations.load() - before, 0) << (pooled ? "pooled" : "packed") << ", " << threads << " threads";
            gdn_context_free(ctx);
        }
#endif
}

}  // namespace

// SPEC 6 at the limits: sizes whose counts or byte spans overflow 64 bits, zero and negative
// counts (head sizes of 0, K = 0, a zero that contradicts the other tensors; T = 0 and B = 0
// are valid empty problems), and consistent but enormous sizes. Each must
// end in an error status with a message naming the tensor, touch no memory (the data pointers
// here are inaccessible), attempt no large allocation, and return at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "big_allocations.h"
#include "dense_problem.h"

namespace gdn::reliability {
namespace {

constexpr size_t kSmallAllocation = size_t{64} << 20;  // a call on small tensors needs far less

gdn_tensor contiguous(void *data, int64_t e0, int64_t e1, int64_t e2, int64_t e3, gdn_type type = GDN_TYPE_F32) {
    gdn_tensor t{};
    t.data = data;
    t.type = type;
    const int64_t ne[4] = {e0, e1, e2, e3};
    int64_t stride = type == GDN_TYPE_F64 ? 8 : 4;
    for (int d = 0; d < 4; ++d) {
        t.ne[d] = ne[d];
        t.nb[d] = stride;
        // Saturate instead of overflowing: such tensors must be refused anyway.
        if (__builtin_mul_overflow(stride, ne[d] > 0 ? ne[d] : 1, &stride)) stride = std::numeric_limits<int64_t>::max() / 8 * 8;
    }
    return t;
}

// A problem of consistent sizes whose tensors point at addresses nothing is mapped at (8 TiB
// apart, so that even enormous tensors do not overlap each other): validation must refuse
// them, or the dry run answer, without reading a byte.
struct HugeCall {
    gdn_problem p{};
    gdn_tensor out{}, states{}, d_out{};
    gdn_grads grads{};

    static void *address(int slot) { return reinterpret_cast<void *>((uintptr_t{1} + slot) << 43); }

    HugeCall(int64_t Sk, int64_t Sv, int64_t Hk, int64_t Hv, int64_t T, int64_t B) {
        p.q = contiguous(address(0), Sk, Hk, T, B);
        p.k = contiguous(address(1), Sk, Hk, T, B);
        p.v = contiguous(address(2), Sv, Hv, T, B);
        p.g = contiguous(address(3), 1, Hv, T, B);
        p.beta = contiguous(address(4), 1, Hv, T, B);
        p.state.type = GDN_TYPE_F32;
        out = contiguous(address(5), Sv, Hv, T, B);
        states = contiguous(address(6), Sk, Sv, Hv, B);
        d_out = contiguous(address(7), Sv, Hv, T, B);
        grads.v = contiguous(address(8), Sv, Hv, T, B);
    }
    HugeCall(int64_t Sk, int64_t Sv, int64_t H, int64_t T, int64_t B) : HugeCall(Sk, Sv, H, H, T, B) {}
};

struct Outcome {
    gdn_status status;
    std::string message;
    double seconds;
    size_t largest_allocation;
};

template <class Call>
Outcome timed(gdn_context *ctx, Call &&call) {
    LargestAllocation largest;
    const auto start = std::chrono::steady_clock::now();
    const gdn_status s = call();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return {s, gdn_last_error(ctx), seconds, largest.bytes()};
}

class Limits : public ::testing::Test {
protected:
    void SetUp() override { ctx_ = make_context("ref"); }
    void TearDown() override { gdn_context_free(ctx_); }

    // The forward and the backward (computing and dry-run) on `call` all refuse it cleanly.
    void expect_refused(HugeCall &call, gdn_status expected, const std::string &fragment) {
        const Outcome outcomes[] = {
            timed(ctx_, [&] { return gdn_forward(ctx_, &call.p, &call.out, &call.states); }),
            timed(ctx_, [&] { return gdn_check_forward(ctx_, &call.p, &call.out, &call.states); }),
            timed(ctx_, [&] { return gdn_backward(ctx_, &call.p, &call.d_out, nullptr, &call.grads); }),
        };
        for (const Outcome &o : outcomes) {
            ++refused_;
            EXPECT_EQ(o.status, expected) << o.message;
            EXPECT_NE(o.message.find(fragment), std::string::npos) << "message: " << o.message;
            EXPECT_LT(o.seconds, 0.5);
            EXPECT_LT(o.largest_allocation, kSmallAllocation);
        }
    }

    gdn_context *ctx_ = nullptr;
    int refused_ = 0;
};

TEST_F(Limits, ElementCountOverflowsInt64) {
    HugeCall call(1 << 20, 4, 1, int64_t{1} << 40, 1 << 20);  // 2^80 elements in q
    expect_refused(call, GDN_ERROR_SHAPE, "q: ne = [1048576, 1, 1099511627776, 1048576] has more elements than int64");
}

TEST_F(Limits, ByteSpanOverflowsInt64) {
    HugeCall counts(4, 4, 1, int64_t{1} << 60, 8);  // 2^65 elements: the count overflows
    expect_refused(counts, GDN_ERROR_SHAPE, "q: ne = [4, 1, 1152921504606846976, 8] has more elements than int64");
    HugeCall bytes(4, 4, 1, int64_t{1} << 60, 1);  // 2^62 elements fit; 2^64 bytes do not
    expect_refused(bytes, GDN_ERROR_LAYOUT, "q: the last element's byte offset overflows");
    HugeCall strides(4, 4, 1, 8, 1);
    strides.p.v.nb[2] = int64_t{1} << 61;  // (8 - 1) * 2^61 bytes overflows
    expect_refused(strides, GDN_ERROR_LAYOUT, "v: the last element's byte offset overflows");
}

TEST_F(Limits, ExtentWrapsTheAddressSpace) {
    HugeCall call(4, 4, 1, 8, 1);
    call.p.k.data = reinterpret_cast<void *>(std::numeric_limits<uintptr_t>::max() - 63);  // aligned, 64 bytes below the top
    expect_refused(call, GDN_ERROR_LAYOUT, "k: the last element's byte offset overflows");
}

TEST_F(Limits, ZeroAndNegativeCountsInEveryTensorAndDimension) {
    const int64_t bad_counts[] = {0, -1, std::numeric_limits<int64_t>::min()};
    const char *names[] = {"q", "k", "v", "g", "beta", "out"};
    for (int which = 0; which < 6; ++which)
        for (int d = 0; d < 4; ++d)
            for (int64_t bad : bad_counts) {
                HugeCall call(4, 4, 2, 8, 2);
                gdn_tensor *t[] = {&call.p.q, &call.p.k, &call.p.v, &call.p.g, &call.p.beta, &call.out};
                const int64_t before = t[which]->ne[d];
                t[which]->ne[d] = bad;
                std::string fragment = std::string(names[which]) + ".ne[" + std::to_string(d) + "] = " + std::to_string(bad);
                // A zero token or sequence count in q alone is q's shape, which k then contradicts.
                if (which == 0 && d >= 2 && bad == 0) fragment = "k.ne[" + std::to_string(d) + "] = " + std::to_string(before);
                SCOPED_TRACE(fragment);
                // out is only read by the forward: the backward of this call is valid (and would
                // read the inaccessible inputs), so only the forward is asked about out.
                if (which == 5) {
                    const Outcome o = timed(ctx_, [&] { return gdn_forward(ctx_, &call.p, &call.out, &call.states); });
                    ++refused_;
                    EXPECT_EQ(o.status, GDN_ERROR_SHAPE);
                    EXPECT_NE(o.message.find(fragment), std::string::npos) << o.message;
                } else {
                    expect_refused(call, GDN_ERROR_SHAPE, fragment);
                }
            }
    RecordProperty("bad_inputs", refused_);
    EXPECT_EQ(refused_, 5 * 4 * 3 * 3 + 4 * 3);
}

TEST_F(Limits, NamedZeroSizes) {
    struct Case {
        const char *what;
        int64_t Sk, Sv, H, T, B;
        const char *fragment;
    };
    const Case cases[] = {
        {"Sk = 0", 0, 4, 1, 8, 1, "q.ne[0] = 0"},
        {"Sv = 0", 4, 0, 1, 8, 1, "v.ne[0] = 0"},
        {"H = 0", 4, 4, 0, 8, 1, "q.ne[1] = 0"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.what);
        HugeCall call(c.Sk, c.Sv, c.H, c.T, c.B);
        expect_refused(call, GDN_ERROR_SHAPE, c.fragment);
    }
    // T = 0 and B = 0 are empty problems: valid (the dry run; the data pointers here are not real).
    for (const Case &c : {Case{"T = 0", 4, 4, 1, 0, 1, ""}, Case{"B = 0", 4, 4, 1, 8, 0, ""}}) {
        SCOPED_TRACE(c.what);
        HugeCall empty(c.Sk, c.Sv, c.H, c.T, c.B);
        EXPECT_EQ(gdn_check_forward(ctx_, &empty.p, &empty.out, &empty.states), GDN_OK) << gdn_last_error(ctx_);
        EXPECT_EQ(gdn_check_backward(ctx_, &empty.p, &empty.d_out, nullptr, &empty.grads), GDN_OK) << gdn_last_error(ctx_);
    }
    // K = 0 snapshots: states with ne[3] = 0.
    HugeCall call(4, 4, 1, 8, 1);
    call.states.ne[3] = 0;
    const Outcome o = timed(ctx_, [&] { return gdn_forward(ctx_, &call.p, &call.out, &call.states); });
    EXPECT_EQ(o.status, GDN_ERROR_SHAPE);
    EXPECT_NE(o.message.find("states.ne[3] = 0"), std::string::npos) << o.message;
}

// Consistent sizes past 2^31 tokens (SPEC 6: handled or refused with GDN_ERROR_UNSUPPORTED).
// Only the dry run is asked: the tensors are not real. It must answer at once, allocate
// nothing large, and say OK or UNSUPPORTED.
TEST_F(Limits, TokensPastInt32AreTakenOrRefusedAsUnsupported) {
    for (const char *backend : {"ref", "cpu", "cuda"}) {
        if (!gdn_backend_available(backend)) continue;
        SCOPED_TRACE(backend);
        gdn_context *ctx = make_context(backend);
        for (int64_t T : {(int64_t{1} << 31) - 1, int64_t{1} << 31, (int64_t{1} << 31) + 1, int64_t{1} << 40}) {
            HugeCall call(2, 2, 1, T, 1);
            const Outcome f = timed(ctx, [&] { return gdn_check_forward(ctx, &call.p, &call.out, &call.states); });
            const Outcome b = timed(ctx, [&] { return gdn_check_backward(ctx, &call.p, &call.d_out, nullptr, &call.grads); });
            for (const Outcome &o : {f, b}) {
                EXPECT_TRUE(o.status == GDN_OK || o.status == GDN_ERROR_UNSUPPORTED) << gdn_status_string(o.status) << " " << o.message;
                EXPECT_LT(o.seconds, 0.5);
                EXPECT_LT(o.largest_allocation, kSmallAllocation);
            }
        }
        gdn_context_free(ctx);
    }
}

// Head sizes whose state (Sk * Sv elements per unit) no machine holds. The tensors the caller
// passes are modest (q, k, v of 2^20 to 2^31 elements per token) but the state is not: the
// backend must refuse, or fail its allocation cleanly, instead of crashing, overflowing an
// index or corrupting memory. Inaccessible pointers make any read before the refusal fatal.
TEST_F(Limits, StateTooLargeForAnyMachineIsRefused) {
    for (int64_t head : {int64_t{1} << 20, int64_t{1} << 31}) {
        SCOPED_TRACE("Sk = Sv = " + std::to_string(head));
        HugeCall call(head, head, 1, 1, 1);
        const Outcome f = timed(ctx_, [&] { return gdn_forward(ctx_, &call.p, &call.out, nullptr); });
        const Outcome b = timed(ctx_, [&] { return gdn_backward(ctx_, &call.p, &call.d_out, nullptr, &call.grads); });
        for (const Outcome &o : {f, b}) {
            EXPECT_TRUE(o.status == GDN_ERROR_UNSUPPORTED || o.status == GDN_ERROR_OUT_OF_MEMORY)
                << gdn_status_string(o.status) << " " << o.message;
            EXPECT_LE(o.largest_allocation, size_t{1} << 40) << "an allocation of " << o.largest_allocation << " bytes was attempted";
        }
    }
}

// Head sizes whose scratch no machine holds, on every host backend: the dry run answers what the
// call answers (SPEC 4.1), UNSUPPORTED, with nothing large allocated. (Sk * Sv = 2^63 + 2^32
// wraps int64 to 2^32; at Sk = Sv = 2^32 it wraps to 0.)
TEST_F(Limits, HeadSizesPastAnyMachineAreRefusedByTheDryRunAsByTheCall) {
    const int64_t sizes[][2] = {{int64_t{1} << 20, int64_t{1} << 20},
                                {int64_t{1} << 31, int64_t{1} << 31},
                                {int64_t{1} << 32, (int64_t{1} << 31) + 1},
                                {int64_t{1} << 32, int64_t{1} << 32}};
    for (const char *backend : {"ref", "cpu"}) {
        if (!gdn_backend_available(backend)) continue;
        gdn_context *ctx = make_context(backend, 1);
        for (const auto &size : sizes) {
            SCOPED_TRACE(std::string(backend) + ": Sk = " + std::to_string(size[0]) + ", Sv = " + std::to_string(size[1]));
            HugeCall call(size[0], size[1], 1, 1, 1);
            const Outcome outcomes[] = {
                timed(ctx, [&] { return gdn_check_forward(ctx, &call.p, &call.out, nullptr); }),
                timed(ctx, [&] { return gdn_forward(ctx, &call.p, &call.out, nullptr); }),
                timed(ctx, [&] { return gdn_check_backward(ctx, &call.p, &call.d_out, nullptr, &call.grads); }),
                timed(ctx, [&] { return gdn_backward(ctx, &call.p, &call.d_out, nullptr, &call.grads); }),
            };
            for (const Outcome &o : outcomes) {
                EXPECT_EQ(o.status, GDN_ERROR_UNSUPPORTED) << gdn_status_string(o.status) << " " << o.message;
                EXPECT_NE(o.message.find("2^40 bytes"), std::string::npos) << o.message;
                EXPECT_LT(o.largest_allocation, kSmallAllocation);
            }
        }
        gdn_context_free(ctx);
    }
}

// A share count past what a context may run (GDN_MAX_THREADS) is refused at once: a share's
// schedule takes time and memory in nth.
TEST_F(Limits, ShareCountsPastTheThreadLimitAreRefused) {
    if (!gdn_backend_available("cpu")) GTEST_SKIP() << "no cpu backend";
    gdn_context *ctx = make_context("cpu", 1);
    DenseProblem problem(Sizes{}, GDN_TYPE_F32, 7);
    gdn_problem p = problem.problem();
    gdn_tensor out = problem.out.tensor();
    for (int nth : {GDN_MAX_THREADS + 1, 1 << 26, std::numeric_limits<int>::max()}) {
        const Outcome o = timed(ctx, [&] { return gdn_forward_share(ctx, &p, &out, nullptr, 0, nth); });
        EXPECT_EQ(o.status, GDN_ERROR_INVALID_ARGUMENT) << "nth = " << nth << ": " << o.message;
        EXPECT_LT(o.seconds, 0.5);
        EXPECT_LT(o.largest_allocation, kSmallAllocation);
    }
    EXPECT_EQ(gdn_forward_share(ctx, &p, &out, nullptr, 0, GDN_MAX_THREADS), GDN_OK) << gdn_last_error(ctx);
    gdn_context_free(ctx);
}

// SPEC 6: a call that fails leaves every output as it was, an allocation failure included. Here
// one sequence has a token and 2^20 have none: the list of their state copies (about 160 MB)
// cannot be allocated, after the backend could have written the first sequence's output.
TEST_F(Limits, AnAllocationThatFailsLeavesEveryOutputAsItWas) {
    const int64_t N = int64_t{1} << 20;
    std::vector<int32_t> offsets(N + 1, 1);
    offsets[0] = 0;
    gdn_tensor cu_seqlens = contiguous(offsets.data(), N + 1, 1, 1, 1, GDN_TYPE_I32);
    for (const char *backend : {"ref", "cpu"}) {
        if (!gdn_backend_available(backend)) continue;
        SCOPED_TRACE(backend);
        gdn_context *ctx = make_context(backend, 1);
        Sizes s;
        s.Sk = s.Sv = 2;
        s.Hk = s.Hv = 1;
        s.T = 1;
        DenseProblem one_token(s, GDN_TYPE_F32, 11);
        gdn_problem p = one_token.problem();
        p.cu_seqlens = cu_seqlens;
        std::vector<float> s0(static_cast<size_t>(4 * N), 0.5f), states(s0.size(), -7.0f), ds0(s0.size(), -7.0f);
        std::vector<float> out(2, -7.0f), dv(2, -7.0f), d_states(s0.size(), 0.25f);
        p.state = contiguous(s0.data(), 2, 2, 1, N);
        gdn_tensor out_t = contiguous(out.data(), 2, 1, 1, 1), states_t = contiguous(states.data(), 2, 2, 1, N);
        gdn_tensor d_out_t = one_token.d_out.tensor(), d_states_t = contiguous(d_states.data(), 2, 2, 1, N);
        gdn_grads grads{};
        grads.v = contiguous(dv.data(), 2, 1, 1, 1);
        grads.state = contiguous(ds0.data(), 2, 2, 1, N);
        ASSERT_EQ(gdn_check_forward(ctx, &p, &out_t, &states_t), GDN_OK) << gdn_last_error(ctx);
        gdn_status forward, backward;
        {
            RefuseAllocationsOver limit(size_t{64} << 20);  // the call's own vectors fit; the copies' list does not
            forward = gdn_forward(ctx, &p, &out_t, &states_t);
            backward = gdn_backward(ctx, &p, &d_out_t, &d_states_t, &grads);
        }
        EXPECT_EQ(forward, GDN_ERROR_OUT_OF_MEMORY) << gdn_last_error(ctx);
        EXPECT_EQ(backward, GDN_ERROR_OUT_OF_MEMORY) << gdn_last_error(ctx);
        for (const std::vector<float> *written : {&out, &states, &dv, &ds0})
            EXPECT_EQ(std::count(written->begin(), written->end(), -7.0f), static_cast<std::ptrdiff_t>(written->size()));
        // With the memory there, the same calls run.
        EXPECT_EQ(gdn_forward(ctx, &p, &out_t, &states_t), GDN_OK) << gdn_last_error(ctx);
        EXPECT_EQ(states[4 * (N - 1)], 0.5f);
        EXPECT_EQ(gdn_backward(ctx, &p, &d_out_t, &d_states_t, &grads), GDN_OK) << gdn_last_error(ctx);
        EXPECT_EQ(ds0[4 * (N - 1)], 0.25f);
        gdn_context_free(ctx);
    }
}

// The backward's checkpoints grow with units * (T / segment) * Sk * Sv: that product must not
// overflow into a small allocation the backward then writes past.
TEST_F(Limits, CheckpointCountOverflowIsRefused) {
    // Sk * Sv = 2^60 accumulators per unit, 256 units per key head: 2^68 does not fit int64.
    HugeCall call(int64_t{1} << 40, 1 << 20, 1, 256, 1, 1);
    const Outcome b = timed(ctx_, [&] { return gdn_backward(ctx_, &call.p, &call.d_out, nullptr, &call.grads); });
    EXPECT_TRUE(b.status == GDN_ERROR_UNSUPPORTED || b.status == GDN_ERROR_OUT_OF_MEMORY || b.status == GDN_ERROR_LAYOUT ||
                b.status == GDN_ERROR_SHAPE)
        << gdn_status_string(b.status) << " " << b.message;
    EXPECT_LE(b.largest_allocation, size_t{1} << 40);
}

}  // namespace
}  // namespace gdn::reliability

// The cuda backend's contract beyond the numbers: availability, refusals that leave outputs
// untouched, in-place decoding, and work queued on the caller's stream with no host wait.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "cuda_fixture.h"

namespace gdn_cuda_test {
namespace {

TEST(CudaContract, AvailableExactlyWhenADeviceExists) {
    std::string why;
    const bool device = device_available(why);
    EXPECT_EQ(gdn_backend_available("cuda") != 0, device) << why;
    if (!device) {
        gdn_context *ctx = nullptr;
        EXPECT_EQ(gdn_context_create("cuda", nullptr, &ctx), GDN_ERROR_BACKEND);
        EXPECT_EQ(ctx, nullptr);
        EXPECT_NE(std::string(gdn_last_create_error()).find("cuda"), std::string::npos) << gdn_last_create_error();
    }
}

TEST(CudaContract, DeviceOutOfRangeIsABackendError) {
    GDN_SKIP_WITHOUT_CUDA();
    gdn_context_params params = gdn_context_default_params();
    params.device = 4096;
    gdn_context *ctx = nullptr;
    EXPECT_EQ(gdn_context_create("cuda", &params, &ctx), GDN_ERROR_BACKEND);
    EXPECT_NE(std::string(gdn_last_create_error()).find("device 4096"), std::string::npos) << gdn_last_create_error();
}

Case small_case() {
    Case c;
    c.Sk = 32, c.Sv = 16, c.Hk = 1, c.Hv = 2, c.T = 6, c.B = 1, c.Bq = 1;
    return c;
}

TEST(CudaContract, HostPointersAreRefusedAndOutputsUntouched) {
    GDN_SKIP_WITHOUT_CUDA();
    const Problem p = make_problem(small_case());
    Context gpu = make_context("cuda");
    Tensor out = make_tensor(16, 2, 6, 1, -7.0f);
    gdn_problem prob = p.device();
    prob.v = p.v.host;  // a host pointer among device pointers
    EXPECT_EQ(gdn_forward(gpu.get(), &prob, &out.device, nullptr), GDN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(gdn_last_error(gpu.get())).find("v.data"), std::string::npos) << gdn_last_error(gpu.get());
    out.buffer->download();
    for (float x : out.buffer->host) ASSERT_EQ(x, -7.0f);
}

// SPEC 3.1: states are F32 in every call but an F64 one (the C API refuses a BF16 state), and
// the F64 call is ref's (the cuda backend refuses it by name); nothing is written either way.
TEST(CudaContract, BF16StatesAndF64CallsAreRefused) {
    GDN_SKIP_WITHOUT_CUDA();
    const Problem p = make_problem(small_case());
    Context gpu = make_context("cuda");
    Tensor out = make_tensor(16, 2, 6, 1, -7.0f);
    const auto as = [](gdn_tensor t, gdn_type type, int64_t bytes) {
        t.type = type;
        for (int d = 0; d < 4; ++d) t.nb[d] = t.nb[d] / 4 * bytes;
        return t;
    };
    gdn_problem prob = p.device();
    for (gdn_tensor *t : {&prob.q, &prob.k, &prob.v, &prob.g, &prob.beta, &prob.state}) *t = as(*t, GDN_TYPE_BF16, 2);
    gdn_tensor o = as(out.device, GDN_TYPE_BF16, 2);
    EXPECT_EQ(gdn_forward(gpu.get(), &prob, &o, nullptr), GDN_ERROR_TYPE) << gdn_last_error(gpu.get());
    EXPECT_NE(std::string(gdn_last_error(gpu.get())).find("state"), std::string::npos) << gdn_last_error(gpu.get());

    // F64 views of the same buffers (wider than the data: never read, the call is refused first).
    prob = p.device();
    for (gdn_tensor *t : {&prob.q, &prob.k, &prob.v, &prob.g, &prob.beta, &prob.state}) *t = as(*t, GDN_TYPE_F64, 8);
    o = as(out.device, GDN_TYPE_F64, 8);
    EXPECT_EQ(gdn_forward(gpu.get(), &prob, &o, nullptr), GDN_ERROR_TYPE) << gdn_last_error(gpu.get());
    EXPECT_NE(std::string(gdn_last_error(gpu.get())).find("F64"), std::string::npos) << gdn_last_error(gpu.get());
    out.buffer->download();
    for (float x : out.buffer->host) ASSERT_EQ(x, -7.0f);
}

TEST(CudaContract, HeadSizesAbove256AreUnsupported) {
    GDN_SKIP_WITHOUT_CUDA();
    Case c = small_case();
    c.Sk = 512, c.T = 2;
    const Problem p = make_problem(c);
    Context gpu = make_context("cuda");
    Tensor out = make_tensor(16, 2, 2, 1, -7.0f);
    const gdn_problem prob = p.device();
    EXPECT_EQ(gdn_forward(gpu.get(), &prob, &out.device, nullptr), GDN_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(gdn_last_error(gpu.get())).find("256"), std::string::npos) << gdn_last_error(gpu.get());
}

TEST(CudaContract, StridesThatSplitAFloatAreUnsupported) {
    GDN_SKIP_WITHOUT_CUDA();
    const Problem p = make_problem(small_case());
    Context gpu = make_context("cuda");
    gdn_problem prob = p.device();
    prob.q.nb[3] += 2;  // still inside q's buffer is irrelevant: refused before any read
    Tensor out = make_tensor(16, 2, 6, 1, -7.0f);
    EXPECT_EQ(gdn_forward(gpu.get(), &prob, &out.device, nullptr), GDN_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(gdn_last_error(gpu.get())).find("q.nb[3]"), std::string::npos) << gdn_last_error(gpu.get());
}

TEST(CudaContract, InPlaceStateUpdateMatchesRef) {
    GDN_SKIP_WITHOUT_CUDA();
    Case c = small_case();
    c.T = 1;
    const Problem p = make_problem(c);
    Context ref = make_context("ref"), gpu = make_context("cuda");
    // ref writes the next state to a separate tensor; cuda updates s0 in place.
    Tensor want = make_tensor(c.Sk, c.Sv, c.Hv, c.B), want_out = make_tensor(c.Sv, c.Hv, c.T, c.B);
    const gdn_problem host = p.host();
    ASSERT_EQ(gdn_forward(ref.get(), &host, &want_out.host, &want.host), GDN_OK) << gdn_last_error(ref.get());
    Tensor got_out = make_tensor(c.Sv, c.Hv, c.T, c.B);
    const gdn_problem dev = p.device();
    ASSERT_EQ(gdn_forward(gpu.get(), &dev, &got_out.device, &dev.state), GDN_OK) << gdn_last_error(gpu.get());
    p.s0.buffer->download();
    got_out.buffer->download();
    EXPECT_LT(nmse(p.s0.host, want.host), 1e-10);
    EXPECT_LT(nmse(got_out.host, want_out.host), 1e-10);
}

// A host function that holds the stream until released (or 20 s pass).
struct Gate {
    std::atomic<bool> open{false};
    static void CUDART_CB hold(void *self) {
        auto *g = static_cast<Gate *>(self);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!g->open.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
};

TEST(CudaContract, WorkGoesOnTheGivenStreamWithoutHostWaits) {
    GDN_SKIP_WITHOUT_CUDA();
    Case c = small_case();
    c.T = 40, c.K = 1;
    const Problem p = make_problem(c);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    {
        Context gpu = make_context("cuda", stream);
        Context ref = make_context("ref");
        Tensor out = make_tensor(c.Sv, c.Hv, c.T, c.B, -7.0f), dv = make_tensor(c.Sv, c.Hv, c.T, c.B, -7.0f);
        Tensor d_out = make_tensor(c.Sv, c.Hv, c.T, c.B, 0.25f);
        Gate gate;
        ASSERT_EQ(cudaLaunchHostFunc(stream, &Gate::hold, &gate), cudaSuccess);
        // Both calls must return while the stream is held: they queue work, they do not wait.
        const auto start = std::chrono::steady_clock::now();
        const gdn_problem dev = p.device();
        EXPECT_EQ(gdn_forward(gpu.get(), &dev, &out.device, nullptr), GDN_OK) << gdn_last_error(gpu.get());
        gdn_grads grads{};
        grads.v = dv.device;
        EXPECT_EQ(gdn_backward(gpu.get(), &dev, &d_out.device, nullptr, &grads), GDN_OK) << gdn_last_error(gpu.get());
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "the work should still be queued behind the held stream";
        gate.open = true;
        EXPECT_LT(seconds, 10.0) << "a call waited for the held stream";
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        out.buffer->download();
        dv.buffer->download();
        Tensor want = make_tensor(c.Sv, c.Hv, c.T, c.B), want_dv = make_tensor(c.Sv, c.Hv, c.T, c.B);
        const gdn_problem host = p.host();
        ASSERT_EQ(gdn_forward(ref.get(), &host, &want.host, nullptr), GDN_OK);
        gdn_grads ref_grads{};
        ref_grads.v = want_dv.host;
        ASSERT_EQ(gdn_backward(ref.get(), &host, &d_out.host, nullptr, &ref_grads), GDN_OK);
        EXPECT_LT(nmse(out.host, want.host), 1e-10);
        EXPECT_LT(nmse(dv.host, want_dv.host), 1e-9);
    }
    cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace gdn_cuda_test

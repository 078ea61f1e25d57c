// cuda_bench: times the cuda backend through the public C API at the Qwen3.5-27B shape
// (Sk = Sv = 128, Hk = 16, Hv = 48, B = 1, q/k/v views into the packed conv buffer, F32).
// Per T: median over timed calls (CUDA events around each call, at least 0.3 s and 5 calls) of
// the forward (out and final state) as the backend chooses it ("fwd": chunked from T = 64) and
// with the per-token kernel forced ("fwd-tok", chunk_size = 1), and the backward (every
// gradient) likewise ("bwd", "bwd-tok").
//
//   cuda_bench [T ...]        default: 1 512 4096
#include <cstdio>
#include <vector>

#include "bench_support.h"
#include "gdn/gdn.h"

namespace {

using namespace gdn_bench;

constexpr int Sk = 128, Sv = 128, Hk = 16, Hv = 48, B = 1;
constexpr int64_t conv_dim = 2 * Hk * Sk + Hv * Sv;

gdn_tensor tensor(float *data, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, int64_t row_stride, int64_t token_stride) {
    return gdn_bench::tensor(data, GDN_TYPE_F32, 4, ne0, ne1, ne2, ne3, row_stride, token_stride);
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<int64_t> Ts;
    for (int i = 1; i < argc; ++i) Ts.push_back(std::atoll(argv[i]));
    if (Ts.empty()) Ts = {1, 512, 4096};
    gdn_context *ctx = nullptr, *ctx_token = nullptr;
    gdn_context_params per_token = gdn_context_default_params();
    per_token.chunk_size = 1;
    if (gdn_context_create("cuda", nullptr, &ctx) != GDN_OK || gdn_context_create("cuda", &per_token, &ctx_token) != GDN_OK) {
        std::fprintf(stderr, "cuda_bench: %s\n", gdn_last_create_error());
        return 2;
    }
    std::printf("%-8s %-6s %12s %12s %14s %16s\n", "op", "T", "median_ms", "tokens/s", "GFLOP/s", "workspace_bytes");
    int failures = 0;
    for (int64_t T : Ts) {
        float *qkv = device_random(static_cast<size_t>(conv_dim * T * B), -0.1f, 0.1f, 1);
        float *g = device_random(static_cast<size_t>(Hv * T * B), -0.3f, -0.02f, 2);
        float *beta = device_random(static_cast<size_t>(Hv * T * B), 0.0f, 1.0f, 3);
        float *s0 = device_random(static_cast<size_t>(Sk) * Sv * Hv * B, -0.5f, 0.5f, 4);
        float *out = device_random(static_cast<size_t>(Sv) * Hv * T * B, 0, 0, 5);
        float *state = device_random(static_cast<size_t>(Sk) * Sv * Hv * B, 0, 0, 6);
        float *d_out = device_random(static_cast<size_t>(Sv) * Hv * T * B, -1, 1, 7);
        float *grad_qk = device_random(static_cast<size_t>(2) * Sk * Hk * T * B, 0, 0, 8);
        float *grad_v = device_random(static_cast<size_t>(Sv) * Hv * T * B, 0, 0, 9);
        float *grad_gb = device_random(static_cast<size_t>(2) * Hv * T * B, 0, 0, 10);
        float *grad_s0 = device_random(static_cast<size_t>(Sk) * Sv * Hv * B, 0, 0, 11);

        gdn_problem p{};
        p.q = tensor(qkv, Sk, Hk, T, B, Sk, conv_dim);
        p.k = tensor(qkv + Hk * Sk, Sk, Hk, T, B, Sk, conv_dim);
        p.v = tensor(qkv + 2 * Hk * Sk, Sv, Hv, T, B, Sv, conv_dim);
        p.g = tensor(g, 1, Hv, T, B, 1, Hv);
        p.beta = tensor(beta, 1, Hv, T, B, 1, Hv);
        p.state = tensor(s0, Sk, Sv, Hv, B, Sk, Sk * Sv);
        p.state.nb[3] = 4LL * Sk * Sv * Hv;
        const gdn_tensor o = tensor(out, Sv, Hv, T, B, Sv, Sv * Hv);
        gdn_tensor st = tensor(state, Sk, Sv, Hv, B, Sk, Sk * Sv);
        st.nb[3] = 4LL * Sk * Sv * Hv;
        const gdn_tensor dO = tensor(d_out, Sv, Hv, T, B, Sv, Sv * Hv);
        gdn_grads grads{};
        grads.q = tensor(grad_qk, Sk, Hk, T, B, Sk, Sk * Hk);
        grads.k = tensor(grad_qk + Sk * Hk * T * B, Sk, Hk, T, B, Sk, Sk * Hk);
        grads.v = tensor(grad_v, Sv, Hv, T, B, Sv, Sv * Hv);
        grads.g = tensor(grad_gb, 1, Hv, T, B, 1, Hv);
        grads.beta = tensor(grad_gb + Hv * T * B, 1, Hv, T, B, 1, Hv);
        grads.state = tensor(grad_s0, Sk, Sv, Hv, B, Sk, Sk * Sv);
        grads.state.nb[3] = 4LL * Sk * Sv * Hv;

        gdn_status status = GDN_OK;
        const double fwd = median_ms([&] { status = status != GDN_OK ? status : gdn_forward(ctx, &p, &o, &st); });
        const uint64_t fwd_ws = gdn_context_workspace_bytes(ctx);
        if (status != GDN_OK) std::fprintf(stderr, "forward T=%lld: %s\n", static_cast<long long>(T), gdn_last_error(ctx));
        failures += status != GDN_OK;
        status = GDN_OK;
        const double fwd_token = median_ms([&] { status = status != GDN_OK ? status : gdn_forward(ctx_token, &p, &o, &st); });
        if (status != GDN_OK) std::fprintf(stderr, "forward (per-token) T=%lld: %s\n", static_cast<long long>(T), gdn_last_error(ctx_token));
        failures += status != GDN_OK;
        status = GDN_OK;
        const double bwd = median_ms([&] { status = status != GDN_OK ? status : gdn_backward(ctx, &p, &dO, nullptr, &grads); });
        const uint64_t bwd_ws = gdn_context_workspace_bytes(ctx);
        if (status != GDN_OK) std::fprintf(stderr, "backward T=%lld: %s\n", static_cast<long long>(T), gdn_last_error(ctx));
        failures += status != GDN_OK;
        status = GDN_OK;
        const double bwd_token = median_ms([&] { status = status != GDN_OK ? status : gdn_backward(ctx_token, &p, &dO, nullptr, &grads); });
        const uint64_t bwd_token_ws = gdn_context_workspace_bytes(ctx_token);
        if (status != GDN_OK) std::fprintf(stderr, "backward (per-token) T=%lld: %s\n", static_cast<long long>(T), gdn_last_error(ctx_token));
        failures += status != GDN_OK;
        check(cudaDeviceSynchronize(), "after the timed calls");

        const double per_token_flops = double(Hv) * B * Sk * Sv;  // SPEC section 8: 8 and 24 flops per state entry
        std::printf("%-8s %-6lld %12.4f %12.4g %14.1f %16llu\n", "fwd", static_cast<long long>(T), fwd, T * B / (fwd * 1e-3),
                    8 * per_token_flops * T / (fwd * 1e6), static_cast<unsigned long long>(fwd_ws));
        std::printf("%-8s %-6lld %12.4f %12.4g %14.1f %16llu\n", "fwd-tok", static_cast<long long>(T), fwd_token,
                    T * B / (fwd_token * 1e-3), 8 * per_token_flops * T / (fwd_token * 1e6), 0ULL);
        std::printf("%-8s %-6lld %12.4f %12.4g %14.1f %16llu\n", "bwd", static_cast<long long>(T), bwd, T * B / (bwd * 1e-3),
                    24 * per_token_flops * T / (bwd * 1e6), static_cast<unsigned long long>(bwd_ws));
        std::printf("%-8s %-6lld %12.4f %12.4g %14.1f %16llu\n", "bwd-tok", static_cast<long long>(T), bwd_token,
                    T * B / (bwd_token * 1e-3), 24 * per_token_flops * T / (bwd_token * 1e6),
                    static_cast<unsigned long long>(bwd_token_ws));
        for (float *ptr : {qkv, g, beta, s0, out, state, d_out, grad_qk, grad_v, grad_gb, grad_s0}) cudaFree(ptr);
    }
    gdn_context_free(ctx);
    gdn_context_free(ctx_token);
    return failures == 0 ? 0 : 1;
}

// BF16 and F16 tensors and GDN_PRECISION_BF16 on the device, through the public C API; skips
// without a device (tests/cuda/emulated_half_types_test.cpp checks the same kernels on CPU
// threads on every machine).
//
// EXACT: a call with BF16/F16 tensors gives exactly the bits of the all-F32 call on the
// converted inputs with each output rounded once (SPEC 3.1), on the per-token and the chunked
// kernels. BF16 precision: the chunked kernels within bf16_products_bound.h of ref, the same
// bits every run.
#include <cuda_runtime_api.h>

#include <map>

#include "bf16_products_bound.h"
#include "cuda_fixture.h"
#include "math/elements.h"

namespace gdn_cuda_test {
namespace {

uint16_t to_bits(gdn_type type, float x) { return type == GDN_TYPE_BF16 ? gdn::float_to_bf16(x) : gdn::float_to_f16(x); }
float round_trip(gdn_type type, float x) {
    if (type == GDN_TYPE_F32) return x;
    const uint16_t h = to_bits(type, x);
    return type == GDN_TYPE_BF16 ? gdn::bf16_to_float(h) : gdn::f16_to_float(h);
}

// 2-byte elements on the host with a device mirror.
struct HalfBuffer {
    std::vector<uint16_t> host;
    uint16_t *device = nullptr;
    explicit HalfBuffer(size_t count, uint16_t fill = 0) : host(count, fill) {
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&device), count * 2), cudaSuccess);
        upload();
    }
    ~HalfBuffer() { cudaFree(device); }
    HalfBuffer(const HalfBuffer &) = delete;
    HalfBuffer &operator=(const HalfBuffer &) = delete;
    void upload() { EXPECT_EQ(cudaMemcpy(device, host.data(), host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess); }
    void download() { EXPECT_EQ(cudaMemcpy(host.data(), device, host.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess); }
};

// Typed copies of F32 tensors: each F32 buffer's values are first rounded to the type (host and
// device, so the F32 call sees the converted values), then copied as 2-byte elements in the same
// layout; a tensor's typed view points at the same element of the copy.
struct TypedCopies {
    std::map<Mirror *, std::shared_ptr<HalfBuffer>> copies;

    gdn_tensor typed(const Tensor &t, gdn_type type) {
        if (!t.present() || type == GDN_TYPE_F32) return t.present() ? t.device : gdn_tensor{};
        Mirror *m = t.buffer.get();
        auto &copy = copies[m];
        if (copy == nullptr) {
            for (float &x : m->host) x = round_trip(type, x);
            m->upload();
            copy = std::make_shared<HalfBuffer>(m->host.size());
            for (size_t i = 0; i < m->host.size(); ++i) copy->host[i] = to_bits(type, m->host[i]);
            copy->upload();
        }
        gdn_tensor r = t.device;
        r.type = type;
        r.data = copy->device + (static_cast<float *>(t.device.data) - m->device);
        for (int d = 0; d < 4; ++d) r.nb[d] = t.device.nb[d] / 2;
        return r;
    }
};

// An output of both calls: the F32 call's (f32) and the typed call's (typed: in `twin` for an
// F32 output, else in `half`), all -7 before.
struct Output {
    gdn_type type;
    Tensor f32, twin;
    std::shared_ptr<HalfBuffer> half;
    gdn_tensor typed{};
    Output(int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, gdn_type t)
        : type(t), f32(make_tensor(ne0, ne1, ne2, ne3, -7.0f)), twin(make_tensor(ne0, ne1, ne2, ne3, -7.0f)) {
        f32.buffer->upload(), twin.buffer->upload();
        typed = twin.device;
        if (type != GDN_TYPE_F32) {
            half = std::make_shared<HalfBuffer>(f32.buffer->host.size(), to_bits(type, -7.0f));
            typed = f32.device;
            typed.type = type;
            typed.data = half->device;
            for (int d = 0; d < 4; ++d) typed.nb[d] = f32.device.nb[d] / 2;
        }
    }

    // The typed call's output is the F32 call's rounded once.
    void expect_rounded_once(const char *what) {
        f32.buffer->download();
        if (type == GDN_TYPE_F32) {
            twin.buffer->download();
            EXPECT_EQ(twin.buffer->host, f32.buffer->host) << what;
            return;
        }
        half->download();
        size_t differ = 0;
        for (size_t i = 0; i < half->host.size(); ++i) differ += half->host[i] != to_bits(type, f32.buffer->host[i]);
        EXPECT_EQ(differ, 0u) << what << ": elements that are not the F32 call's rounded once";
    }
};

struct Types {
    gdn_type x, beta, gate;
};

void expect_identity(const Case &c, const Types &types, int chunk_size) {
    Problem p = make_problem(c);
    TypedCopies copies;
    gdn_problem typed = p.device();
    typed.q = copies.typed(p.q, types.x), typed.k = copies.typed(p.k, types.x), typed.v = copies.typed(p.v, types.x);
    typed.g = copies.typed(p.g, types.gate), typed.beta = copies.typed(p.beta, types.beta);
    const gdn_problem f32 = p.device();  // the converted values, in F32
    Context gpu = make_context("cuda", nullptr, chunk_size);
    const int gw = c.per_channel ? c.Sk : 1;

    Output out(c.Sv, c.Hv, c.T, c.B, types.x), states(c.Sk, c.Sv, c.Hv, int64_t(c.B) * c.K, GDN_TYPE_F32);
    ASSERT_EQ(gdn_forward(gpu.get(), &f32, &out.f32.device, &states.f32.device), GDN_OK) << gdn_last_error(gpu.get());
    ASSERT_EQ(gdn_forward(gpu.get(), &typed, &out.typed, &states.typed), GDN_OK) << gdn_last_error(gpu.get());
    out.expect_rounded_once("out");
    states.expect_rounded_once("states");

    Tensor d_out_f32 = make_tensor(c.Sv, c.Hv, c.T, c.B), d_states = make_tensor(c.Sk, c.Sv, c.Hv, int64_t(c.B) * c.K);
    for (size_t i = 0; i < d_out_f32.buffer->host.size(); ++i) d_out_f32.buffer->host[i] = 0.001f * float(int(i * 7919 % 2001) - 1000);
    for (size_t i = 0; i < d_states.buffer->host.size(); ++i) d_states.buffer->host[i] = 0.0005f * float(int(i * 104729 % 2001) - 1000);
    d_out_f32.buffer->upload(), d_states.buffer->upload();
    const gdn_tensor d_out_typed = copies.typed(d_out_f32, types.x);
    Output dq(c.Sk, c.Hk, c.T, c.Bq, types.x), dk(c.Sk, c.Hk, c.T, c.Bq, types.x), dv(c.Sv, c.Hv, c.T, c.B, types.x);
    Output dg(gw, c.Hv, c.T, c.B, types.gate), dbeta(1, c.Hv, c.T, c.B, types.beta), ds0(c.Sk, c.Sv, c.Hv, c.B, GDN_TYPE_F32);
    gdn_grads g32{dq.f32.device, dk.f32.device, dv.f32.device, dg.f32.device, dbeta.f32.device, ds0.f32.device};
    gdn_grads gtyped{dq.typed, dk.typed, dv.typed, dg.typed, dbeta.typed, ds0.typed};
    if (!c.with_s0) g32.state = gtyped.state = gdn_tensor{};
    ASSERT_EQ(gdn_backward(gpu.get(), &f32, &d_out_f32.device, &d_states.device, &g32), GDN_OK) << gdn_last_error(gpu.get());
    ASSERT_EQ(gdn_backward(gpu.get(), &typed, &d_out_typed, &d_states.device, &gtyped), GDN_OK) << gdn_last_error(gpu.get());
    dq.expect_rounded_once("dq"), dk.expect_rounded_once("dk"), dv.expect_rounded_once("dv");
    dg.expect_rounded_once("dg"), dbeta.expect_rounded_once("dbeta");
    if (c.with_s0) ds0.expect_rounded_once("ds0");
}

Case case_of(int Sk, int Sv, int Hk, int Hv, int64_t T, int B, int Bq, uint32_t seed) {
    Case c;
    c.Sk = Sk, c.Sv = Sv, c.Hk = Hk, c.Hv = Hv, c.T = T, c.B = B, c.Bq = Bq, c.seed = seed;
    return c;
}

TEST(CudaHalfTypes, ExactIdentityPerToken) {
    GDN_SKIP_WITHOUT_CUDA();
    Case kda = case_of(48, 80, 2, 2, 9, 2, 1, 21);
    kda.per_channel = true, kda.K = 2;
    expect_identity(kda, {GDN_TYPE_BF16, GDN_TYPE_BF16, GDN_TYPE_BF16}, 1);
    expect_identity(case_of(32, 64, 1, 2, 20, 1, 1, 22), {GDN_TYPE_F16, GDN_TYPE_F32, GDN_TYPE_BF16}, 1);
}

TEST(CudaHalfTypes, ExactIdentityChunked) {
    GDN_SKIP_WITHOUT_CUDA();
    Case packed = case_of(128, 128, 2, 6, 130, 2, 2, 23);  // the 27B head size, q/k/v views of one buffer
    packed.packed_qkv = true;
    expect_identity(packed, {GDN_TYPE_BF16, GDN_TYPE_F32, GDN_TYPE_F32}, 0);
    Case grouped = case_of(64, 64, 1, 2, 100, 2, 1, 24);
    grouped.grouped = true;
    expect_identity(grouped, {GDN_TYPE_F16, GDN_TYPE_F16, GDN_TYPE_F32}, 0);
}

// BF16 precision on the chunked kernels (bf16 mma): within the bf16 bound of ref, further from
// it than EXACT, and the same bits on a second run.
TEST(CudaHalfTypes, Bf16PrecisionWithinBoundOfRef) {
    GDN_SKIP_WITHOUT_CUDA();
    Case c = case_of(128, 128, 2, 4, 200, 1, 1, 25);
    c.packed_qkv = true;
    Problem p = make_problem(c);
    // q, k, v as a model hands them over: bf16 values (the bound's premise), in F32 tensors.
    for (Tensor *t : {&p.q, &p.k, &p.v}) {
        for (float &x : t->buffer->host) x = round_trip(GDN_TYPE_BF16, x);
        t->buffer->upload();
    }
    Context gpu = make_context("cuda"), ref = make_context("ref");
    gdn_problem host = p.host(), device = p.device();
    device.precision = GDN_PRECISION_BF16;
    Tensor want_out = make_tensor(c.Sv, c.Hv, c.T, c.B), want_states = make_tensor(c.Sk, c.Sv, c.Hv, c.B);
    ASSERT_EQ(gdn_forward(ref.get(), &host, &want_out.host, &want_states.host), GDN_OK) << gdn_last_error(ref.get());
    Tensor out = make_tensor(c.Sv, c.Hv, c.T, c.B), states = make_tensor(c.Sk, c.Sv, c.Hv, c.B);
    ASSERT_EQ(gdn_forward(gpu.get(), &device, &out.device, &states.device), GDN_OK) << gdn_last_error(gpu.get());
    out.buffer->download(), states.buffer->download();
    const double out_err = nmse(out.host, want_out.host);
    EXPECT_LT(out_err, gdn_bf16_bound::kBf16ProductsNmse) << "out";
    EXPECT_LT(nmse(states.host, want_states.host), gdn_bf16_bound::kBf16ProductsNmse) << "states";
    EXPECT_GT(out_err, 1e-12) << "bf16 products as exact as F32: not taken?";
    const std::vector<float> first = out.buffer->host;
    ASSERT_EQ(gdn_forward(gpu.get(), &device, &out.device, &states.device), GDN_OK);
    out.buffer->download();
    EXPECT_EQ(out.buffer->host, first) << "the same bits every run";

    Tensor d_out = make_tensor(c.Sv, c.Hv, c.T, c.B);
    for (size_t i = 0; i < d_out.buffer->host.size(); ++i) d_out.buffer->host[i] = 0.001f * float(int(i * 7919 % 2001) - 1000);
    d_out.buffer->upload();
    const auto grads_of = [&](std::vector<Tensor> &t) {
        t = {make_tensor(c.Sk, c.Hk, c.T, c.Bq), make_tensor(c.Sk, c.Hk, c.T, c.Bq), make_tensor(c.Sv, c.Hv, c.T, c.B),
             make_tensor(1, c.Hv, c.T, c.B),     make_tensor(1, c.Hv, c.T, c.B),     make_tensor(c.Sk, c.Sv, c.Hv, c.B)};
    };
    std::vector<Tensor> want, got;
    grads_of(want), grads_of(got);
    gdn_grads wg{want[0].host, want[1].host, want[2].host, want[3].host, want[4].host, want[5].host};
    gdn_grads gg{got[0].device, got[1].device, got[2].device, got[3].device, got[4].device, got[5].device};
    ASSERT_EQ(gdn_backward(ref.get(), &host, &d_out.host, nullptr, &wg), GDN_OK) << gdn_last_error(ref.get());
    ASSERT_EQ(gdn_backward(gpu.get(), &device, &d_out.device, nullptr, &gg), GDN_OK) << gdn_last_error(gpu.get());
    const char *names[] = {"dq", "dk", "dv", "dg", "dbeta", "ds0"};
    for (int i = 0; i < 6; ++i) {
        got[i].buffer->download();
        EXPECT_LT(nmse(got[i].host, want[i].host), gdn_bf16_bound::kBf16ProductsNmse) << names[i];
    }
}

}  // namespace
}  // namespace gdn_cuda_test

#include "api_target.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <strings.h>
#include <string>
#include <utility>
#include <vector>

#include "byte_reader.h"
#include "call.h"
#include "spec_oracle.h"

namespace gdn::fuzz {
namespace {

ApiTally g_tally;

[[noreturn]] void finding(const Call &c, const std::string &what) {
    std::fprintf(stderr, "\n==== gdn fuzz finding: %s\n%s\n", what.c_str(), c.describe().c_str());
    std::fflush(stderr);
    std::abort();
}

// Contexts kept for the whole run (creating one per input would dominate): per backend name,
// one with the default parameters and the one with the last other parameters asked for.
struct ContextEntry {
    gdn_context *ctx = nullptr;
    gdn_status status = GDN_OK;
    gdn_context_params params = gdn_context_default_params();
    ContextEntry() = default;
    ContextEntry(ContextEntry &&o) noexcept : ctx(o.ctx), status(o.status), params(o.params) { o.ctx = nullptr; }
    ContextEntry &operator=(ContextEntry &&o) noexcept {
        std::swap(ctx, o.ctx);
        status = o.status;
        params = o.params;
        return *this;
    }
    ContextEntry(const ContextEntry &) = delete;
    ~ContextEntry() { gdn_context_free(ctx); }  // at exit, so that LeakSanitizer sees no leak
};

bool same_params(const gdn_context_params &a, const gdn_context_params &b) {
    return a.n_threads == b.n_threads && a.chunk_size == b.chunk_size && a.device == b.device && a.stream == b.stream;
}

bool host_backend(const char *name) { return name && (strcasecmp(name, "ref") == 0 || strcasecmp(name, "cpu") == 0); }

// gdn_context_create held to its contract: a failure leaves no context and a message; negative
// parameters and more than GDN_MAX_THREADS threads are refused as invalid whatever the name;
// ref and cpu start with any other parameters (device is theirs to ignore).
ContextEntry create_checked(const char *name, const gdn_context_params &params) {
    ContextEntry e;
    e.params = params;
    e.status = gdn_context_create(name, &params, &e.ctx);
    const bool valid = params.n_threads >= 0 && params.n_threads <= GDN_MAX_THREADS && params.chunk_size >= 0 && params.device >= 0;
    const char *broken = nullptr;
    if (e.status != GDN_OK && e.ctx != nullptr) broken = "returned a context";
    else if (e.status != GDN_OK && gdn_last_create_error()[0] == '\0') broken = "left no message";
    else if (!valid && e.status != GDN_ERROR_INVALID_ARGUMENT) broken = "did not refuse the parameters as invalid";
    else if (valid && host_backend(name) && e.status != GDN_OK) broken = "did not start a host backend";
    if (broken) {
        std::fprintf(stderr, "gdn fuzz finding: gdn_context_create(\"%s\", n_threads=%d chunk_size=%d device=%d) returned %s (%s) but %s\n",
                     name ? name : "NULL", params.n_threads, params.chunk_size, params.device, gdn_status_string(e.status),
                     gdn_last_create_error(), broken);
        std::abort();
    }
    return e;
}

ContextEntry &context_for(const char *name, const gdn_context_params &params = gdn_context_default_params()) {
    static std::map<std::string, ContextEntry> defaults, others;
    const std::string key = name ? std::string("=") + name : "NULL";
    auto &contexts = default_params(params) ? defaults : others;
    auto it = contexts.find(key);
    if (it == contexts.end()) return contexts.emplace(key, create_checked(name, params)).first->second;
    if (!same_params(it->second.params, params)) it->second = create_checked(name, params);
    return it->second;
}

gdn_context *reference_context() { return context_for("ref").ctx; }

gdn_status invoke(const Call &c, gdn_context *ctx, bool check) {
    const gdn_problem p = c.problem();
    const gdn_grads g = c.grads();
    const gdn_problem *pp = c.problem_null ? nullptr : &p;
    if (!c.backward)
        return check ? gdn_check_forward(ctx, pp, c.pointer(OUT), c.pointer(STATES))
                     : gdn_forward(ctx, pp, c.pointer(OUT), c.pointer(STATES));
    const gdn_grads *gp = c.grads_null ? nullptr : &g;
    return check ? gdn_check_backward(ctx, pp, c.pointer(D_OUT), c.pointer(D_STATES), gp)
                 : gdn_backward(ctx, pp, c.pointer(D_OUT), c.pointer(D_STATES), gp);
}

int64_t count_of(const gdn_tensor &t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

int64_t offset_of(const gdn_tensor &t, int64_t index) {
    int64_t offset = 0;
    for (int d = 0; d < 4; ++d) {
        offset += (index % t.ne[d]) * t.nb[d];
        index /= t.ne[d];
    }
    return offset;
}

double value_at(const uint8_t *p, int type) {
    if (type == GDN_TYPE_F64) {
        double v;
        std::memcpy(&v, p, 8);
        return v;
    }
    if (type == GDN_TYPE_BF16 || type == GDN_TYPE_F16) {
        uint16_t bits;
        std::memcpy(&bits, p, 2);
        return half_value(type, bits);
    }
    float v;
    std::memcpy(&v, p, 4);
    return v;
}

// A contiguous copy of one tensor, its values taken from the arena as it was before the call.
struct Dense {
    std::vector<uint8_t> bytes;
    gdn_tensor t{};
};

Dense dense_like(const gdn_tensor &src) {
    Dense d;
    d.t = src;
    const int64_t elem = element_bytes(raw_type(src));
    d.t.nb[0] = elem;
    for (int i = 1; i < 4; ++i) d.t.nb[i] = d.t.nb[i - 1] * src.ne[i - 1];
    d.bytes.assign(static_cast<size_t>(count_of(src) * elem), 0);
    d.t.data = d.bytes.data();
    return d;
}

Dense dense_copy(const Call &c, const gdn_tensor &src, const std::vector<uint8_t> &before) {
    Dense d = dense_like(src);
    const int64_t elem = element_bytes(raw_type(src));
    const int64_t at = Arena::kGuardBytes + (static_cast<const uint8_t *>(src.data) - c.arena->payload());
    for (int64_t i = 0; i < count_of(src); ++i) std::memcpy(d.bytes.data() + i * elem, before.data() + at + offset_of(src, i), elem);
    return d;
}

// The same call on the ref backend with every tensor contiguous and separate.
std::vector<Dense> reference_outputs(const Call &c, const std::vector<uint8_t> &before) {
    std::vector<Dense> dense(kSlots);
    Call r;
    r.backward = c.backward;
    r.scale = c.scale;
    r.scale_is_explicit = c.scale_is_explicit;
    r.head_map = c.head_map;
    r.precision = c.precision;
    r.sequences = c.sequences;
    r.cu_seqlens = c.cu_seqlens;  // inputs that no call writes: read in place
    r.slots = c.slots;
    r.state_indices = c.state_indices;
    for (int i = 0; i < kSlots; ++i) {
        if (!c.present(i)) continue;
        dense[i] = c.is_output(i) ? dense_like(c.t[i]) : dense_copy(c, c.t[i], before);
        r.t[i] = dense[i].t;
        r.pointer_passed[i] = true;
    }
    if (invoke(r, reference_context(), false) != GDN_OK)
        finding(c, std::string("the call succeeded but ref refused its contiguous copy: ") + gdn_last_error(reference_context()));
    return dense;
}

// Inputs a float-accumulating backend must match ref on: finite and of modest magnitude (the
// fuzzer also plants +-1e30, where F32 arithmetic overflows to Inf or NaN and ref's doubles do
// not, which is not a bug).
bool all_inputs_tame(const Call &c, const std::vector<uint8_t> &before) {
    for (int i = 0; i < kSlots; ++i) {
        if (!c.present(i) || c.is_output(i)) continue;
        const Dense d = dense_copy(c, c.t[i], before);
        for (int64_t n = 0; n < count_of(d.t); ++n) {
            const double x = value_at(d.bytes.data() + n * element_bytes(raw_type(d.t)), raw_type(d.t));
            if (!(std::fabs(x) <= 1e3)) return false;
        }
    }
    return true;
}

// Outputs against the reference; unwritten snapshot slots (T < K) and the pool slots no
// sequence names (in states and grads.state) against their old bytes.
void compare_outputs(const Call &c, const std::vector<uint8_t> &before, bool exact) {
    const std::vector<Dense> ref = reference_outputs(c, before);
    const bool tame = exact || all_inputs_tame(c, before);
    const int64_t T = c.t[Q].ne[2], B = c.t[V].ne[3];
    // Slot s of a sequence is written when s < its length, and slot 0 always (SPEC 2: with no
    // tokens the final state is the initial state). Packed: slot s of sequence n is index s*N + n.
    // Pooled (K = 1): the slots the indices name.
    const std::vector<int64_t> offsets = c.cu_seqlens.data ? offsets_of(c.cu_seqlens) : std::vector<int64_t>{};
    const std::vector<int64_t> indices = c.state_indices.data ? offsets_of(c.state_indices) : std::vector<int64_t>{};
    const bool pooled = c.state_indices.data != nullptr;
    auto slot_written = [&](int64_t index) {
        if (pooled) return std::find(indices.begin(), indices.end(), index) != indices.end();
        if (offsets.empty()) return index / B < std::max<int64_t>(T, 1);
        const int64_t N = static_cast<int64_t>(offsets.size()) - 1, n = index % N;
        return index / N < std::max<int64_t>(offsets[n + 1] - offsets[n], 1);
    };
    // The largest |ref| of a tensor, NaN ignored. Written as a compare, not std::fmax: GCC 12's
    // AArch64 vectoriser crashes (internal compiler error) on that fmax reduction.
    auto largest = [&](int s) {
        const gdn_tensor &t = c.t[s];
        const int64_t elem = element_bytes(raw_type(t));
        double scale = 0;
        for (int64_t i = 0; i < count_of(t); ++i) {
            const double magnitude = std::fabs(value_at(ref[s].bytes.data() + i * elem, raw_type(t)));
            if (magnitude > scale) scale = magnitude;
        }
        return scale;
    };
    // An element's rounding error follows the size of the terms summed into it, not of the sum:
    // the terms of dk (say) can cancel to a hundredth of their size at T = 1 (bf16 products), or
    // to 1e-5 of it where a shared key sums two sequences' gradients (F32: a dk of -7.09e-6 from
    // terms near 1 was 8.7e-9 from ref's). A per-tensor bound fails there where the library is
    // right. The terms of every output are products of the same states, keys and gradients, so
    // the bound also has a floor in the largest output of the whole call: 2^-16 of it for F32
    // arithmetic (256 units of F32 rounding), 2^-4 with bf16 products (16 units of bf16's). It
    // still catches a wrong element or layout, which is off by the size of the values; the
    // harness's NMSE at model shapes measures the rounding itself (docs/RELIABILITY.md).
    double call_scale = 0;
    for (int s = 0; s < kSlots; ++s)
        if (c.present(s) && c.is_output(s)) call_scale = std::max(call_scale, largest(s));
    for (int s = 0; s < kSlots; ++s) {
        if (!c.present(s) || !c.is_output(s)) continue;
        const gdn_tensor &t = c.t[s];
        const int64_t elem = element_bytes(raw_type(t));
        const uint8_t *base = static_cast<const uint8_t *>(t.data);
        const int64_t at = Arena::kGuardBytes + (base - c.arena->payload());
        const double scale = largest(s);
        for (int64_t i = 0; i < count_of(t); ++i) {
            const int64_t off = offset_of(t, i);
            const bool unwritten_slot =
                (s == STATES || (s == DSTATE && pooled)) && !slot_written(i / (t.ne[0] * t.ne[1] * t.ne[2]));
            if (unwritten_slot) {
                if (std::memcmp(base + off, before.data() + at + off, elem) != 0)
                    finding(c, std::string(slot_name(s)) + (pooled ? " slot no sequence names" : " slot past T") +
                                   " was written (element " + std::to_string(i) + ")");
                continue;
            }
            const double got = value_at(base + off, raw_type(t)), want = value_at(ref[s].bytes.data() + i * elem, raw_type(t));
            const bool same = got == want || (std::isnan(got) && std::isnan(want));
            // A float-accumulating backend within 1e-3 of the tensor's largest value; a BF16 or F16
            // result also within one unit in its last place (its F32 result and ref's may round to
            // neighbours), which below the smallest normal is the subnormals' fixed spacing (2^-24
            // for F16, 2^-133 for BF16: an F16 dq of 1.3e-5 once differed from ref by that);
            // never tighter than the call's floor above.
            double tolerance = 1e-3 * (scale + 1e-6);
            if (raw_type(t) == GDN_TYPE_BF16 || raw_type(t) == GDN_TYPE_F16) {
                const bool bf16 = raw_type(t) == GDN_TYPE_BF16;
                tolerance += std::max(std::ldexp(std::max(std::fabs(got), std::fabs(want)), bf16 ? -7 : -10),
                                      bf16 ? 0x1p-133 : 0x1p-24);
            }
            tolerance = std::max(tolerance, (c.precision == GDN_PRECISION_BF16 ? 0x1p-4 : 0x1p-16) * (call_scale + 1e-6));
            if (exact ? same : (!tame || !std::isfinite(scale) || same || std::fabs(got - want) <= tolerance)) continue;
            char msg[200];
            std::snprintf(msg, sizeof msg, "%s element %lld = %.17g but ref on contiguous copies gives %.17g", slot_name(s),
                          static_cast<long long>(i), got, want);
            finding(c, msg);
        }
    }
}

std::vector<uint8_t> writable_bytes(const Call &c) {
    std::vector<uint8_t> mask(c.arena->payload_bytes(), 0);
    for (int s = 0; s < kSlots; ++s) {
        if (!c.present(s) || !c.is_output(s)) continue;
        const gdn_tensor &t = c.t[s];
        const int64_t at = static_cast<const uint8_t *>(t.data) - c.arena->payload();
        for (int64_t i = 0; i < count_of(t); ++i)
            std::memset(mask.data() + at + offset_of(t, i), 1, static_cast<size_t>(element_bytes(raw_type(t))));
    }
    return mask;
}

void expect_refusal_intact(const Call &c, gdn_context *ctx, gdn_status status, const std::vector<uint8_t> &before) {
    if (status < GDN_ERROR_INVALID_ARGUMENT || status > GDN_ERROR_UNKNOWN_BACKEND)
        finding(c, "status " + std::to_string(status) + " is not a gdn_status");
    const char *message = gdn_last_error(ctx);
    if (message == nullptr || message[0] == '\0') finding(c, std::string("error ") + gdn_status_string(status) + " without a message");
    const int64_t changed = c.arena->first_change(before, nullptr);
    if (changed >= 0)
        finding(c, std::string("refused (") + message + ") but arena byte " + std::to_string(changed) + " changed");
}

}  // namespace

const ApiTally &api_tally() { return g_tally; }

namespace {

// GDN_FUZZ_VERBOSE=1 prints each call and what the library said (to see what a seed does).
void trace(const Call &c, const char *stage, gdn_status status, gdn_context *ctx) {
    static const bool verbose = std::getenv("GDN_FUZZ_VERBOSE") != nullptr;
    if (!verbose) return;
    std::fprintf(stderr, "%s: %s %s\n%s", stage, gdn_status_string(status), ctx ? gdn_last_error(ctx) : "", c.describe().c_str());
}

}  // namespace

void run_api_input(const uint8_t *data, size_t size) {
    ByteReader in(data, size);
    Call c = decode_call(in);
    ++g_tally.inputs;

    ContextEntry &entry = context_for(c.backend, c.params);
    if (entry.status != GDN_OK) {  // checked when it was created
        trace(c, "create", entry.status, nullptr);
        ++g_tally.refused;
        return;
    }
    gdn_context *ctx = entry.ctx;
    const bool is_ref = std::strcmp(gdn_context_backend(ctx), "ref") == 0;
    const Judgement judgement = judge(c);
    const std::vector<uint8_t> before = c.arena->snapshot();

    // The dry run first: it touches no tensor data but the values of cu_seqlens and
    // state_indices (read once everything about them and the other tensors is valid), so it is
    // safe on any other pointer. Index tensors outside the arena with a layout not known to be
    // wrong would be read as a caller's are: that call cannot be made here (like a valid call
    // too large for the arena).
    if (!index_tensors_in_arena(c) && judgement.verdict != Verdict::Invalid) {
        ++g_tally.not_backed;
        return;
    }
    const gdn_status checked = invoke(c, ctx, true);
    trace(c, "check", checked, ctx);
    std::string outside;
    const bool backed = all_in_arena(c, outside);
    if (checked != GDN_OK) {
        expect_refusal_intact(c, ctx, checked, before);
        // ref takes every valid call, every type combination of SPEC 3.1 included.
        if (judgement.verdict == Verdict::Valid && is_ref) finding(c, std::string("refused a valid call: ") + gdn_last_error(ctx));
    } else {
        if (judgement.verdict == Verdict::Invalid) finding(c, "accepted an invalid call: " + judgement.reason);
        if (!backed) {
            // A valid layout larger than the arena (a caller may own that much memory): it was
            // judged, but running it would read memory this target does not have.
            ++g_tally.not_backed;
            return;
        }
    }
    if (c.check_only) {
        if (checked != GDN_OK) ++g_tally.refused;
        return;
    }

    const gdn_status status = invoke(c, ctx, false);
    if (status != checked)
        finding(c, std::string("gdn_check_* said ") + gdn_status_string(checked) + " but the call returned " + gdn_status_string(status));
    if (status != GDN_OK) {
        expect_refusal_intact(c, ctx, status, before);
        ++g_tally.refused;
        return;
    }
    if (gdn_last_error(ctx)[0] != '\0') finding(c, "success with a non-empty gdn_last_error");
    const std::vector<uint8_t> mask = writable_bytes(c);
    const int64_t stray = c.arena->first_change(before, &mask);
    if (stray >= 0) finding(c, "byte " + std::to_string(stray) + " outside every output element changed");
    compare_outputs(c, before, is_ref);
    ++g_tally.computed;
}

}  // namespace gdn::fuzz

#include "call.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

namespace gdn::fuzz {
namespace {

constexpr const char *kSlotNames[kSlots] = {"q",     "k",        "v",  "g",  "beta", "state", "out",   "states",
                                            "d_out", "d_states", "dq", "dk", "dv",   "dg",    "dbeta", "dstate"};

// Backend names: mostly the oracle, then the other spellings and names nobody knows.
constexpr const char *kBackends[] = {"ref", "ref", "ref", "REF", "cpu", "Cpu", "cuda", "", "reference", nullptr};

// Counts and strides that break things: zero, negative, one, int64 extremes, powers of two
// around 32-bit limits and values whose products overflow.
constexpr int64_t kOddValues[] = {0,
                                  -1,
                                  1,
                                  2,
                                  3,
                                  4,
                                  8,
                                  -8,
                                  std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min(),
                                  int64_t{1} << 31,
                                  (int64_t{1} << 31) - 1,
                                  int64_t{1} << 32,
                                  (int64_t{1} << 32) + 1,
                                  int64_t{1} << 62,
                                  int64_t{1} << 20};

int64_t odd_value(ByteReader &in) {
    const int pick = in.below(18);
    if (pick < 16) return kOddValues[pick];
    return pick == 16 ? static_cast<int64_t>(in.u16()) : -static_cast<int64_t>(in.u16());
}

// Element types as a caller may pass them, invalid enum values included.
int type_of(int pick) {
    constexpr int kTypes[8] = {GDN_TYPE_F32, GDN_TYPE_F64, GDN_TYPE_F32, GDN_TYPE_F64, GDN_TYPE_F16, GDN_TYPE_BF16, 7, -1};
    return kTypes[pick & 7];
}

// The element type of every slot from q's type `x` and the type byte's upper bits (SPEC 3.1):
// by default q/k/v/out/d_out and their gradients x, beta x, g BF16 beside BF16 and F32
// otherwise, the states F32; an F64 call (or an x outside the enum) has x everywhere. Bit 3:
// beta F32; bit 4: g the other of F32 and BF16; bit 5: the states in x (the rule broken for
// BF16 and F16); bit 6: g in x (broken for F16). The gradients of g and beta follow them.
void assign_types(int slot_type[kSlots], int x, uint8_t bits) {
    const bool mixed = x == GDN_TYPE_F32 || x == GDN_TYPE_BF16 || x == GDN_TYPE_F16;
    for (int i = 0; i < kSlots; ++i) slot_type[i] = x;
    if (!mixed) return;
    const int beta = (bits & 8) ? GDN_TYPE_F32 : x;
    int g = (x == GDN_TYPE_BF16) != ((bits & 16) != 0) ? GDN_TYPE_BF16 : GDN_TYPE_F32;
    if (bits & 64) g = x;
    const int state = (bits & 32) ? x : GDN_TYPE_F32;
    slot_type[BETA] = slot_type[DBETA] = beta;
    slot_type[G] = slot_type[DG] = g;
    for (int s : {STATE, STATES, D_STATES, DSTATE}) slot_type[s] = state;
}

enum class Layout { Contiguous, Padded, Transposed };

int64_t state_sequences(const Call &c) { return c.sequences > 0 ? c.sequences : c.B; }

void shape_of(const Call &c, int slot, int64_t ne[4]) {
    const int64_t S0 = c.slots > 0 ? c.slots : state_sequences(c);  // states per state tensor (K = 1)
    const int64_t S[kSlots][4] = {
        {c.Sk, c.Hk, c.T, c.Bq},         {c.Sk, c.Hk, c.T, c.Bq},      {c.Sv, c.Hv, c.T, c.B},
        {c.gate_width, c.Hv, c.T, c.B},  {1, c.Hv, c.T, c.B},          {c.Sk, c.Sv, c.Hv, S0},
        {c.Sv, c.Hv, c.T, c.B},          {c.Sk, c.Sv, c.Hv, S0 * c.snapshots}, {c.Sv, c.Hv, c.T, c.B},
        {c.Sk, c.Sv, c.Hv, S0 * c.snapshots},   {c.Sk, c.Hk, c.T, c.Bq},      {c.Sk, c.Hk, c.T, c.Bq},
        {c.Sv, c.Hv, c.T, c.B},          {c.gate_width, c.Hv, c.T, c.B}, {1, c.Hv, c.T, c.B},
        {c.Sk, c.Sv, c.Hv, S0}};
    for (int d = 0; d < 4; ++d) ne[d] = S[slot][d];
}

// Places tensors one after another in a byte range that becomes the arena.
struct Placer {
    int64_t cursor = 0;
    int64_t take(int64_t bytes) {
        const int64_t at = cursor;
        cursor += (bytes + 15) / 16 * 16;
        return at;
    }
};

// `swap01`: dimensions 0 and 1 trade places in memory (a value-major state: nb[1] = elem).
void set_strides(gdn_tensor &t, int64_t elem, Layout layout, bool swap01) {
    const int order[4] = {swap01 ? 1 : 0, swap01 ? 0 : 1, 2, 3};  // innermost first
    t.nb[order[0]] = elem;
    if (layout == Layout::Transposed) {  // outer dimensions in reverse order: nb[order[3]] smallest
        int64_t stride = t.ne[order[0]] * elem;
        for (int d = 3; d >= 1; --d) {
            t.nb[order[d]] = stride;
            stride *= t.ne[order[d]];
        }
        return;
    }
    const int64_t pad = layout == Layout::Padded ? elem : 0;
    for (int d = 1; d < 4; ++d) t.nb[order[d]] = t.nb[order[d - 1]] * t.ne[order[d - 1]] + pad * d;
}

// q, k and v (or dq, dk and dv) as views into one packed per-token buffer, as a model's
// conv_qkv_mix projection lays them out: per token [q heads | k heads | v heads].
void place_packed(Call &c, int q, int k, int v, int64_t elem, Placer &placer, int64_t offsets[]) {
    const int64_t row = (2 * c.Hk * c.Sk + c.Hv * c.Sv) * elem;
    const int64_t base = placer.take(row * c.T * c.B);
    const int64_t at[3] = {0, c.Hk * c.Sk * elem, 2 * c.Hk * c.Sk * elem};
    const int slots[3] = {q, k, v};
    for (int i = 0; i < 3; ++i) {
        gdn_tensor &t = c.t[slots[i]];
        t.nb[0] = elem;
        t.nb[1] = t.ne[0] * elem;
        t.nb[2] = row;
        t.nb[3] = row * c.T;
        offsets[slots[i]] = base + at[i];
    }
}

int64_t element_count(const gdn_tensor &t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

uint8_t *element_at(const gdn_tensor &t, int64_t index) {
    int64_t offset = 0;
    for (int d = 0; d < 4; ++d) {
        offset += (index % t.ne[d]) * t.nb[d];
        index /= t.ne[d];
    }
    return static_cast<uint8_t *>(t.data) + offset;
}

// Values in [-1, 1], written as the call's element type (F64, else F32 bits).
void fill_values(Arena &arena, int type, uint64_t seed) {
    uint64_t x = seed | 1;
    auto next = [&x] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return static_cast<double>(x >> 11) * 0x1.0p-53 * 2.0 - 1.0;
    };
    uint8_t *p = arena.payload();
    if (type == GDN_TYPE_F64) {
        for (size_t i = 0; i + 8 <= arena.payload_bytes(); i += 8) {
            const double v = next();
            std::memcpy(p + i, &v, 8);
        }
    } else {
        for (size_t i = 0; i + 4 <= arena.payload_bytes(); i += 4) {
            const float v = static_cast<float>(next());
            std::memcpy(p + i, &v, 4);
        }
    }
}

// A BF16 or F16 tensor's elements rewritten with values in (-1, 1) of its own encoding (the arena
// was filled with F32 bits, whose halves are not such values): a random sign, exponent and
// mantissa, the exponent between 2^-14 and 2^-1.
void fill_half_values(const gdn_tensor &t, uint64_t seed) {
    uint64_t x = seed | 1;
    const bool bf16 = raw_type(t) == GDN_TYPE_BF16;
    for (int64_t i = 0; i < element_count(t); ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const auto r = static_cast<uint32_t>(x >> 16);
        const uint32_t exponent = 1 + r % 14;  // 1..14 of the 14 binades below 1
        const uint16_t bits = bf16 ? static_cast<uint16_t>((r & 0x8000u) | ((127 - exponent) << 7) | ((r >> 4) & 0x7fu))
                                   : static_cast<uint16_t>((r & 0x8000u) | ((15 - exponent) << 10) | ((r >> 4) & 0x3ffu));
        std::memcpy(element_at(t, i), &bits, 2);
    }
}

void put_special(gdn_tensor &t, int64_t index, int kind) {
    const double values[5] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                              -std::numeric_limits<double>::infinity(), 1e30, -1e30};
    // The same in BF16 and F16 bits (1e30 past F16's range: its largest finite value).
    const uint16_t bf16[5] = {0x7FC0, 0x7F80, 0xFF80, 0x714A, 0xF14A}, f16[5] = {0x7E00, 0x7C00, 0xFC00, 0x7BFF, 0xFBFF};
    const double v = values[kind % 5];
    uint8_t *p = element_at(t, index);
    if (raw_type(t) == GDN_TYPE_F64) std::memcpy(p, &v, 8);
    else if (raw_type(t) == GDN_TYPE_BF16) std::memcpy(p, &bf16[kind % 5], 2);
    else if (raw_type(t) == GDN_TYPE_F16) std::memcpy(p, &f16[kind % 5], 2);
    else {
        const auto f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
    }
}

// A tensor that no rule accepts, pointing at memory no access may touch: validation must
// refuse it before reading anything.
void make_bogus(gdn_tensor &t, ByteReader &in) {
    t.data = Arena::forbidden() + in.below(64) * 64;
    switch (in.below(5)) {
        case 0: t.ne[in.below(4)] = 0; break;
        case 1: t.ne[in.below(4)] = -static_cast<int64_t>(in.u8()) - 1; break;
        case 2: t.nb[0] = t.nb[0] == 1 ? 3 : 1; break;  // no gdn_type is 1 or 3 bytes
        case 3: t.nb[1 + in.below(3)] = -static_cast<int64_t>(in.u8()); break;
        default: set_raw_type(t, 7 + in.u8()); break;
    }
}

void write_offsets(const gdn_tensor &o, const std::vector<int64_t> &values) {
    for (size_t i = 0; i < values.size(); ++i) {
        uint8_t *p = static_cast<uint8_t *>(o.data) + i * static_cast<size_t>(o.nb[0]);
        if (raw_type(o) == GDN_TYPE_I32) {
            const auto v = static_cast<int32_t>(values[i]);
            std::memcpy(p, &v, 4);
        } else {
            std::memcpy(p, &values[i], 8);
        }
    }
}

// A bad index tensor (the offsets of cu_seqlens, docs/VARLEN.md; or state_indices, SPEC 3.2):
// values swapped, odd, repeated (an empty sequence; two sequences on one slot), one too few or
// too many, the wrong type or stride, a bogus pointer, absent, on top of an output, or a
// second dimension. `room`: the entries its place in the arena holds.
void mutate_index_tensor(Call &c, gdn_tensor &o, int64_t room, ByteReader &in) {
    // Readable: an earlier pass may have changed the type, stride or count, so the whole span
    // must still lie in the arena (its guards are poisoned).
    const bool readable = o.data != nullptr && integer_type(raw_type(o)) && o.nb[0] == element_bytes(raw_type(o)) &&
                          o.ne[0] >= 1 && o.ne[0] <= room && c.arena->holds(o.data, static_cast<uint64_t>(o.ne[0] * o.nb[0]));
    std::vector<int64_t> values = readable ? offsets_of(o) : std::vector<int64_t>{};
    void *const where = o.data;
    const int type = raw_type(o);
    const auto pick = [&] { return static_cast<size_t>(in.below(static_cast<int>(values.size()))); };
    switch (in.below(10)) {
        case 0:
            if (!values.empty()) {
                const size_t i = pick(), j = pick();
                std::swap(values[i], values[j]);
            }
            break;
        case 1:
            if (!values.empty()) {
                const size_t i = pick();
                values[i] = odd_value(in);
            }
            break;
        case 2: if (values.size() > 1) { const size_t i = 1 + pick() % (values.size() - 1); values[i] = values[i - 1]; } break;
        case 3: o.ne[0] += in.bit() ? 1 : -1; break;
        case 4: set_raw_type(o, in.bit() ? type_of(in.u8()) : (raw_type(o) == GDN_TYPE_I32 ? GDN_TYPE_I64 : GDN_TYPE_I32)); break;
        case 5: o.nb[0] = in.bit() ? 2 * o.nb[0] : 1; break;
        case 6: make_bogus(o, in); break;
        case 7: o.data = nullptr; break;
        case 8: o.data = c.t[in.below(kSlots)].data; break;  // on another tensor (an output: ALIAS)
        default: o.ne[1 + in.below(3)] = 2; break;
    }
    // The values go back only where they were read from, in the layout they were read in.
    if (readable && o.data == where && raw_type(o) == type && o.nb[0] == element_bytes(type) && !values.empty())
        write_offsets(o, values);
}

// Pool indices for `sequences` sequences and `slots` slots: the first entries of a permutation
// of the slots (each sequence on a slot of its own), then, one byte per sequence, most kept and
// some made negative (-1, -2, -3, the type's minimum), a repeat of an earlier entry or out of
// range (slots, slots + 1, slots + 2, the type's maximum).
std::vector<int64_t> decode_indices(ByteReader &in, int64_t sequences, int64_t slots, bool i32) {
    std::vector<int64_t> slot(static_cast<size_t>(slots));
    for (int64_t s = 0; s < slots; ++s) slot[static_cast<size_t>(s)] = s;
    for (int64_t s = slots - 1; s > 0; --s) std::swap(slot[static_cast<size_t>(s)], slot[static_cast<size_t>(in.below(static_cast<int>(s) + 1))]);
    std::vector<int64_t> out(slot.begin(), slot.begin() + sequences);
    const int64_t lowest = i32 ? INT32_MIN : std::numeric_limits<int64_t>::min();
    const int64_t highest = i32 ? INT32_MAX : std::numeric_limits<int64_t>::max();
    for (int64_t n = 0; n < sequences; ++n) {
        const uint8_t b = in.u8();
        int64_t &x = out[static_cast<size_t>(n)];
        if (b < 160) continue;
        if (b < 200) x = b == 199 ? lowest : -1 - (b - 160) % 3;
        else if (b < 230) x = n > 0 ? out[static_cast<size_t>((b - 200) % n)] : x;
        else x = b == 255 ? highest : slots + (b - 230) % 3;
    }
    return out;
}

void mutate(Call &c, ByteReader &in) {
    const int slot = in.below(kSlots);
    gdn_tensor &t = c.t[slot];
    const int d = in.below(4);
    switch (in.below(14)) {
        case 0: t.data = nullptr; break;
        case 1: make_bogus(t, in); break;
        case 2: t.ne[d] = odd_value(in); break;
        case 3: t.nb[d] = odd_value(in); break;
        case 4: set_raw_type(t, type_of(in.u8())); break;
        case 5:  // misaligned or shifted (NULL shifted is a small bogus address)
            t.data = reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(t.data) + (in.below(16) - 8));
            break;
        case 6: {  // aliasing: the data of another slot, with or without its layout
            const gdn_tensor &other = c.t[in.below(kSlots)];
            if (in.bit()) t = other;
            else t.data = other.data;
            break;
        }
        case 7: c.pointer_passed[slot] = !c.pointer_passed[slot]; break;
        case 8: c.problem_null = !c.problem_null; break;
        case 9: c.grads_null = !c.grads_null; break;
        case 10: c.head_map = in.bit() ? in.below(4) : -1 - in.below(3); break;
        case 11: {
            const float scales[6] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                     -1.0f, 1e30f, 1e-40f, -0.0f};
            if (in.bit()) c.scale_is_explicit = !c.scale_is_explicit;
            else c.scale = scales[in.below(6)];
            break;
        }
        case 12: t.nb[d] = t.nb[in.below(4)]; break;  // two dimensions with one stride: overlap
        default: {  // one more, or twice as many (wrapping, as a caller's arithmetic might)
            const auto n = static_cast<uint64_t>(t.ne[d]);
            t.ne[d] = static_cast<int64_t>(in.bit() ? n + 1 : n * 2);
            break;
        }
    }
}

}  // namespace

const char *slot_name(int slot) { return slot >= 0 && slot < kSlots ? kSlotNames[slot] : "?"; }

int64_t element_bytes(int type) {
    switch (type) {
        case GDN_TYPE_F32: return 4;
        case GDN_TYPE_F64: return 8;
        case GDN_TYPE_F16:
        case GDN_TYPE_BF16: return 2;
        case GDN_TYPE_I32: return 4;
        case GDN_TYPE_I64: return 8;
        default: return 0;
    }
}

double half_value(int type, uint16_t bits) {
    const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
    if (type == GDN_TYPE_BF16) {
        const uint32_t u = static_cast<uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
    if (exponent == 0x1f) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
    if (exponent == 0) return sign * std::ldexp(mantissa, -24);
    return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

std::vector<int64_t> offsets_of(const gdn_tensor &t) {
    std::vector<int64_t> out(static_cast<size_t>(t.ne[0]));
    for (size_t i = 0; i < out.size(); ++i) {
        const uint8_t *p = static_cast<const uint8_t *>(t.data) + static_cast<int64_t>(i) * t.nb[0];
        if (raw_type(t) == GDN_TYPE_I32) {
            int32_t v;
            std::memcpy(&v, p, 4);
            out[i] = v;
        } else {
            std::memcpy(&out[i], p, 8);
        }
    }
    return out;
}

bool tensor_span(const gdn_tensor &t, int64_t &span) {
    span = 0;
    for (int d = 0; d < 4; ++d) {
        if (t.ne[d] < 0) return false;
        if (t.ne[d] == 0) return true;  // empty: no bytes
    }
    span = element_bytes(raw_type(t));
    for (int d = 0; d < 4; ++d) {
        if (t.nb[d] < 0) return false;
        int64_t step;
        if (__builtin_mul_overflow(t.ne[d] - 1, t.nb[d], &step) || __builtin_add_overflow(span, step, &span)) return false;
    }
    return true;
}

bool Call::used(int slot) const {
    if (slot <= STATE) return true;
    return backward ? slot >= D_OUT : slot <= STATES;
}

bool Call::present(int slot) const {
    if (!used(slot) || t[slot].data == nullptr) return false;
    const bool by_pointer = slot == OUT || slot == STATES || slot == D_OUT || slot == D_STATES;
    return !by_pointer || pointer_passed[slot];
}

gdn_problem Call::problem() const {
    gdn_problem p{};
    p.q = t[Q];
    p.k = t[K];
    p.v = t[V];
    p.g = t[G];
    p.beta = t[BETA];
    p.state = t[STATE];
    p.scale = scale;
    p.scale_is_explicit = scale_is_explicit;
    std::memcpy(&p.head_map, &head_map, sizeof head_map);
    std::memcpy(&p.precision, &precision, sizeof precision);
    p.cu_seqlens = cu_seqlens;
    p.state_indices = state_indices;
    return p;
}

gdn_grads Call::grads() const {
    gdn_grads g{};
    g.q = t[DQ];
    g.k = t[DK];
    g.v = t[DV];
    g.g = t[DG];
    g.beta = t[DBETA];
    g.state = t[DSTATE];
    return g;
}

std::string Call::describe() const {
    std::ostringstream s;
    s << (backward ? "backward" : "forward") << (check_only ? " (check)" : "") << " backend="
      << (backend ? backend : "NULL") << " Sk=" << Sk << " Sv=" << Sv << " Hk=" << Hk << " Hv=" << Hv << " T=" << T
      << " B=" << B << " Bq=" << Bq << " K=" << snapshots << " gate=" << gate_width << " scale=" << scale
      << (scale_is_explicit ? " (explicit)" : "")
      << " head_map=" << head_map << " precision=" << precision << (problem_null ? " problem=NULL" : "") << (grads_null ? " grads=NULL" : "");
    if (!default_params(params))
        s << " n_threads=" << params.n_threads << " chunk_size=" << params.chunk_size << " device=" << params.device;
    s << "\n";
    const uint8_t *base = arena ? arena->payload() : nullptr;
    for (int i = 0; i < kSlots; ++i) {
        if (!used(i)) continue;
        const gdn_tensor &x = t[i];
        s << "  " << slot_name(i) << (present(i) ? "" : " (absent)") << ": type=" << raw_type(x) << " data=";
        if (x.data == nullptr) s << "NULL";
        else if (arena && arena->holds(x.data, 0)) s << "arena+" << (static_cast<const uint8_t *>(x.data) - base);
        else s << x.data;
        s << " ne=[" << x.ne[0] << "," << x.ne[1] << "," << x.ne[2] << "," << x.ne[3] << "] nb=[" << x.nb[0] << ","
          << x.nb[1] << "," << x.nb[2] << "," << x.nb[3] << "]\n";
    }
    auto index_tensor = [&](const char *name, const gdn_tensor &x) {
        if (x.data == nullptr) return;
        s << "  " << name << ": type=" << raw_type(x) << " data=" << x.data << " ne=[" << x.ne[0] << "," << x.ne[1] << ","
          << x.ne[2] << "," << x.ne[3] << "] nb=[" << x.nb[0] << "," << x.nb[1] << "," << x.nb[2] << "," << x.nb[3] << "]";
        if (arena && integer_type(raw_type(x)) && x.ne[0] >= 1 && x.ne[0] <= 64 && x.nb[0] == element_bytes(raw_type(x)) &&
            arena->holds(x.data, static_cast<uint64_t>(x.ne[0] * x.nb[0])))
            for (int64_t v : offsets_of(x)) s << " " << v;
        s << "\n";
    };
    index_tensor(("cu_seqlens (N=" + std::to_string(sequences) + ")").c_str(), cu_seqlens);
    index_tensor(("state_indices (slots=" + std::to_string(slots) + ")").c_str(), state_indices);
    return s.str();
}

// The context's parameters: values at and around each limit of gdn_context_create, and
// ordinary ones. Read last, after a marker byte 'P', so that inputs written before they were
// (whose tail, if any, is something else) keep their meaning: the defaults.
gdn_context_params decode_params(ByteReader &in) {
    static constexpr int kThreads[] = {0, 1, 2, 3, -1, INT_MIN, GDN_MAX_THREADS + 1, 100000, INT_MAX};
    static constexpr int kChunks[] = {0, 1, 2, 3, 5, 64, 100, 1 << 20, INT_MAX, -1, INT_MIN};
    static constexpr int kDevices[] = {0, 1, 1000, INT_MAX, -1, INT_MIN};
    gdn_context_params p = gdn_context_default_params();
    if (in.u8() != 'P') return p;
    p.n_threads = kThreads[in.below(sizeof kThreads / sizeof kThreads[0])];
    p.chunk_size = kChunks[in.below(sizeof kChunks / sizeof kChunks[0])];
    p.device = kDevices[in.below(sizeof kDevices / sizeof kDevices[0])];
    return p;
}

// gdn_problem.precision: EXACT and BF16 mostly, and values outside the enum. Read after the
// parameters, behind a marker byte 'R', so that inputs written before it keep EXACT.
int decode_precision(ByteReader &in) {
    static constexpr int kPrecisions[] = {GDN_PRECISION_EXACT, GDN_PRECISION_BF16, GDN_PRECISION_BF16, 2, -1, INT_MAX, INT_MIN};
    if (in.u8() != 'R') return GDN_PRECISION_EXACT;
    return kPrecisions[in.below(sizeof kPrecisions / sizeof kPrecisions[0])];
}

bool default_params(const gdn_context_params &p) {
    const gdn_context_params d = gdn_context_default_params();
    return p.n_threads == d.n_threads && p.chunk_size == d.chunk_size && p.device == d.device && p.stream == d.stream;
}

Call decode_call(ByteReader &in) {
    Call c;
    const uint8_t op = in.u8();
    c.backward = (op & 1) != 0;
    c.check_only = (op & 6) == 6;  // one input in four only asks
    c.backend = kBackends[in.below(sizeof(kBackends) / sizeof(kBackends[0]))];
    const uint8_t type_byte = in.u8();
    const int type = type_of(type_byte);
    int slot_type[kSlots];
    assign_types(slot_type, type, type_byte);

    c.Sk = 1 + in.below(4);
    c.Sv = 1 + in.below(4);
    c.Hk = 1 + in.below(2);
    c.Hv = c.Hk * (1 + in.below(2));
    c.T = 1 + in.below(6);
    c.Bq = 1 + in.below(2);
    c.B = c.Bq * (1 + in.below(2));
    c.snapshots = 1 + in.below(3);
    const uint8_t flags = in.u8();
    c.gate_width = (flags & 1) ? c.Sk : 1;
    c.head_map = (flags & 2) ? GDN_HEAD_MAP_GROUPED : GDN_HEAD_MAP_TILED;
    const bool with_s0 = (flags & 4) == 0;
    const bool packed_inputs = (flags & 8) != 0, packed_grads = (flags & 16) != 0;
    // Serving (flags bit 7, which inputs written before it never set): a byte of value-major
    // bits for state, states, d_states and grads.state (bits 0-3), a pool (bit 4) with I32
    // indices (bit 5), states on state itself (bit 6, the in-place update); with a pool, a byte
    // of extra slots (bits 0-1) and whether the drawn K stays (bit 2; else K = 1).
    const uint8_t serving = (flags & 128) ? in.u8() : 0;
    const bool pooled = (serving & 16) != 0, i32_indices = (serving & 32) != 0, in_place = (serving & 64) != 0;
    int64_t extra_slots = 0;
    if (pooled) {
        const uint8_t pool = in.u8();
        extra_slots = pool & 3;
        if (!(pool & 4)) c.snapshots = 1;
    }
    const uint8_t wanted = static_cast<uint8_t>(~in.u8());  // bits: which optional tensors are given
    // Packed sequences: one stream of T tokens cut into N >= 1 sequences at distinct points.
    std::vector<int64_t> cuts;
    if (flags & 32) {
        c.B = c.Bq = 1;
        for (int64_t t = 0; t <= c.T; ++t) cuts.push_back(t);
        for (int64_t drop = in.below(static_cast<int>(c.T)); drop > 0; --drop)  // N = T - drop
            cuts.erase(cuts.begin() + 1 + in.below(static_cast<int>(cuts.size()) - 2));
        c.sequences = static_cast<int64_t>(cuts.size()) - 1;
    }
    std::vector<int64_t> indices;
    if (pooled) {
        c.slots = state_sequences(c) + extra_slots;
        indices = decode_indices(in, state_sequences(c), c.slots, i32_indices);
    }

    // Layout, in a byte range that becomes the arena.
    auto elem_of = [&](int slot) { return element_bytes(slot_type[slot]) ? element_bytes(slot_type[slot]) : 4; };
    const int64_t elem = elem_of(Q);  // q/k/v's and dq/dk/dv's, which packed views share
    Placer placer;
    int64_t offsets[kSlots] = {};
    for (int i = 0; i < kSlots; ++i) {
        set_raw_type(c.t[i], slot_type[i]);
        shape_of(c, i, c.t[i].ne);
    }
    if (packed_inputs) place_packed(c, Q, K, V, elem, placer, offsets);
    if (packed_grads && c.backward) place_packed(c, DQ, DK, DV, elem, placer, offsets);
    for (int i = 0; i < kSlots; ++i) {
        if (!c.used(i) || (packed_inputs && i <= V) || (packed_grads && c.backward && i >= DQ && i <= DV)) continue;
        const bool value_major = state_shaped(i) && (serving & (1 << (i == STATE ? 0 : i == STATES ? 1 : i == D_STATES ? 2 : 3)));
        set_strides(c.t[i], elem_of(i), static_cast<Layout>(in.below(3)), value_major);
        int64_t span = 0;
        tensor_span(c.t[i], span);
        offsets[i] = placer.take(span);
    }
    const int offsets_type = (flags & 64) ? GDN_TYPE_I32 : GDN_TYPE_I64;
    const int64_t offsets_elem = element_bytes(offsets_type);
    const int64_t offsets_at = c.sequences > 0 ? placer.take((c.sequences + 2) * offsets_elem) : 0;  // + 1 spare entry
    const int indices_type = i32_indices ? GDN_TYPE_I32 : GDN_TYPE_I64;
    const int64_t indices_at = pooled ? placer.take((state_sequences(c) + 1) * element_bytes(indices_type)) : 0;  // + 1 spare
    c.arena = std::make_unique<Arena>(static_cast<size_t>(placer.cursor));
    const uint64_t value_seed = in.u64();
    fill_values(*c.arena, type, value_seed);
    for (int i = 0; i < kSlots; ++i) {
        if (!c.used(i)) continue;
        c.t[i].data = c.arena->payload() + offsets[i];
        c.pointer_passed[i] = true;
        if (element_bytes(slot_type[i]) == 2) fill_half_values(c.t[i], value_seed + static_cast<uint64_t>(i));
    }
    if (!with_s0) c.t[STATE].data = nullptr;
    const int optional[] = {OUT, STATES, D_OUT, D_STATES, DQ, DK, DV, DG};
    for (int i = 0; i < 8; ++i)
        if (!(wanted & (1 << i))) c.t[optional[i]].data = nullptr;

    // Non-finite and huge values in any tensor.
    for (int n = in.below(4); n > 0; --n) {
        gdn_tensor &t = c.t[in.below(kSlots)];
        const int64_t index = in.u16();
        const int kind = in.u8();
        if (t.data != nullptr && element_bytes(raw_type(t)) > 0 && !integer_type(raw_type(t)))
            put_special(t, index % element_count(t), kind);
    }
    if (c.sequences > 0) {
        gdn_tensor &o = c.cu_seqlens;
        o.data = c.arena->payload() + offsets_at;
        set_raw_type(o, offsets_type);
        o.ne[0] = c.sequences + 1;
        o.ne[1] = o.ne[2] = o.ne[3] = 1;
        o.nb[0] = offsets_elem;
        o.nb[1] = o.nb[2] = o.nb[3] = o.ne[0] * offsets_elem;
        cuts.push_back(c.T);  // the spare entry
        write_offsets(o, cuts);
    }
    if (pooled) {
        gdn_tensor &o = c.state_indices;
        o.data = c.arena->payload() + indices_at;
        set_raw_type(o, indices_type);
        o.ne[0] = state_sequences(c);
        o.ne[1] = o.ne[2] = o.ne[3] = 1;
        o.nb[0] = element_bytes(indices_type);
        o.nb[1] = o.nb[2] = o.nb[3] = o.ne[0] * o.nb[0];
        indices.push_back(0);  // the spare entry
        write_offsets(o, indices);
    }
    if (in_place && !c.backward && c.t[STATE].data != nullptr) c.t[STATES] = c.t[STATE];
    for (int n = in.below(7); n > 0; --n) mutate(c, in);
    if (c.sequences > 0)
        for (int n = in.below(4); n > 0; --n) mutate_index_tensor(c, c.cu_seqlens, c.sequences + 2, in);
    if (c.slots > 0)
        for (int n = in.below(4); n > 0; --n) mutate_index_tensor(c, c.state_indices, state_sequences(c) + 1, in);
    c.params = decode_params(in);
    c.precision = decode_precision(in);
    return c;
}

}  // namespace gdn::fuzz

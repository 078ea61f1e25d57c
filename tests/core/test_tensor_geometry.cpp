// Tensor geometry (src/core/tensor.h): element counts, byte spans, and the overlap tests that
// validation relies on to refuse aliasing outputs and to accept packed, interleaved views.
// Layouts are built by hand at fake addresses (nothing here is dereferenced) and, where the
// functions claim to be exact, checked against a brute-force enumeration of element intervals.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "random.h"

namespace {

using gdn::overlaps;
using gdn::self_overlaps;

constexpr uintptr_t kBase = uintptr_t{1} << 36;  // a fake address, never dereferenced

gdn_tensor layout(uintptr_t address, std::array<int64_t, 4> ne, std::array<int64_t, 4> nb,
                  gdn_type type = GDN_TYPE_F32) {
    gdn_tensor t{};
    t.data = reinterpret_cast<void *>(address);
    t.type = type;
    for (int d = 0; d < 4; ++d) {
        t.ne[d] = ne[d];
        t.nb[d] = nb[d];
    }
    return t;
}

// Contiguous strides for ne, in bytes.
std::array<int64_t, 4> packed(std::array<int64_t, 4> ne, int64_t element = 4) {
    std::array<int64_t, 4> nb{};
    nb[0] = element;
    for (int d = 1; d < 4; ++d) nb[d] = nb[d - 1] * ne[d - 1];
    return nb;
}

struct Interval {
    uintptr_t begin, end;
};

std::vector<Interval> element_intervals(const gdn_tensor &t) {
    std::vector<Interval> out;
    const auto es = static_cast<uintptr_t>(gdn::type_size(t.type));
    for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t.ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) {
                    const uintptr_t at = reinterpret_cast<uintptr_t>(gdn::element_ptr(t, i0, i1, i2, i3));
                    out.push_back({at, at + es});
                }
    return out;
}

bool intersect(const Interval &a, const Interval &b) { return a.begin < b.end && b.begin < a.end; }

bool brute_self_overlaps(const gdn_tensor &t) {
    const auto e = element_intervals(t);
    for (size_t i = 0; i < e.size(); ++i)
        for (size_t j = i + 1; j < e.size(); ++j)
            if (intersect(e[i], e[j])) return true;
    return false;
}

bool brute_overlaps(const gdn_tensor &a, const gdn_tensor &b) {
    const auto ea = element_intervals(a), eb = element_intervals(b);
    for (const Interval &x : ea)
        for (const Interval &y : eb)
            if (intersect(x, y)) return true;
    return false;
}

// ---- counts and spans --------------------------------------------------------------------

TEST(TensorGeometry, ElementCountAndSpan) {
    const gdn_tensor t = layout(kBase, {4, 3, 2, 5}, packed({4, 3, 2, 5}));
    EXPECT_EQ(gdn::element_count(t), 120);
    EXPECT_EQ(gdn::byte_span(t), 480);
    const gdn::ByteRange r = gdn::byte_range(t);
    EXPECT_EQ(r.begin, kBase);
    EXPECT_EQ(r.end, kBase + 480);
    // A padded layout spans up to the last byte of its last element, not a whole stride more.
    const gdn_tensor padded = layout(kBase, {4, 3, 1, 1}, {4, 20, 1000, 1000});
    EXPECT_EQ(gdn::byte_span(padded), 2 * 20 + 16);
    EXPECT_EQ(gdn::type_size(GDN_TYPE_F64), 8u);
    EXPECT_EQ(gdn::type_size(GDN_TYPE_F16), 2u);
    EXPECT_EQ(gdn::type_size(GDN_TYPE_BF16), 2u);
    EXPECT_EQ(gdn::type_size(static_cast<gdn_type>(9)), 0u);
}

TEST(TensorGeometry, CountAndSpanOverflowAreReported) {
    EXPECT_EQ(gdn::element_count(layout(kBase, {int64_t{1} << 32, int64_t{1} << 32, 1, 1}, {4, 4, 4, 4})), -1);
    EXPECT_EQ(gdn::element_count(layout(kBase, {0, 3, 1, 1}, {4, 4, 4, 4})), 0);  // empty: valid (T = 0, B = 0)
    EXPECT_EQ(gdn::byte_span(layout(kBase, {4, 3, 0, 1}, {4, 16, 0, 0})), 0);
    EXPECT_EQ(gdn::element_count(layout(kBase, {4, -1, 1, 1}, {4, 4, 4, 4})), -1);
    EXPECT_EQ(gdn::byte_span(layout(kBase, {1, int64_t{1} << 40, 1, 1}, {4, int64_t{1} << 30, 4, 4})), -1);
    EXPECT_EQ(gdn::byte_span(layout(kBase, {1, 2, 2, 1}, {4, INT64_MAX / 2, INT64_MAX / 2, 4})), -1);
    // Large but representable: no false alarm.
    EXPECT_EQ(gdn::byte_span(layout(kBase, {1, 2, 1, 1}, {4, int64_t{1} << 40, 4, 4})), (int64_t{1} << 40) + 4);
}

// ---- self overlap ---------------------------------------------------------------------------

TEST(TensorGeometry, ContiguousAndPaddedLayoutsDoNotSelfOverlap) {
    EXPECT_FALSE(self_overlaps(layout(kBase, {128, 48, 4096, 1}, packed({128, 48, 4096, 1}))));
    EXPECT_FALSE(self_overlaps(layout(kBase, {4, 3, 5, 2}, {4, 20, 64, 400})));
    EXPECT_FALSE(self_overlaps(layout(kBase, {4, 3, 5, 2}, {8, 40, 128, 800}, GDN_TYPE_F64)));
    // Permuted strides (dim 3 innermost among the outer dims) still nest.
    EXPECT_FALSE(self_overlaps(layout(kBase, {4, 3, 5, 2}, {4, 32, 96, 16})));
    // A dimension of count 1 may carry any stride.
    EXPECT_FALSE(self_overlaps(layout(kBase, {4, 1, 3, 1}, {4, 4, 16, 1})));
}

TEST(TensorGeometry, RowsShorterThanTheirStrideSelfOverlap) {
    EXPECT_TRUE(self_overlaps(layout(kBase, {4, 2, 1, 1}, {4, 12, 64, 64})));  // rows of 16 bytes every 12
    EXPECT_TRUE(self_overlaps(layout(kBase, {4, 2, 1, 1}, {4, 4, 64, 64})));
    EXPECT_TRUE(self_overlaps(layout(kBase, {4, 2, 2, 1}, {4, 16, 16, 64})));  // two dims, one stride
    EXPECT_TRUE(self_overlaps(layout(kBase, {2, 3, 1, 4}, {8, 16, 1, 32}, GDN_TYPE_F64)));
}

TEST(TensorGeometry, NonNestedLayoutsAreEnumeratedExactly) {
    // Rows of 4 bytes at {0, 12} + {0, 8, 16}: 0 8 16 12 20 28, all distinct, but no stride
    // covers the span of the one inside it, so only enumeration can tell.
    const gdn_tensor apart = layout(kBase, {1, 2, 3, 1}, {4, 12, 8, 64});
    EXPECT_FALSE(brute_self_overlaps(apart));
    EXPECT_FALSE(self_overlaps(apart));
    // {0, 8, 16, 24} + {0, 12, 24}: 24 twice.
    const gdn_tensor clash = layout(kBase, {1, 4, 3, 1}, {4, 8, 12, 64});
    EXPECT_TRUE(brute_self_overlaps(clash));
    EXPECT_TRUE(self_overlaps(clash));
}

TEST(TensorGeometry, OverlapAmongTooManyRowsToEnumerateIsFound) {
    // Non-nested (stride 12 < the span of the dim inside it), 2^12 * 2^11 rows > 2^22, and
    // truly overlapping (8 * 3 == 12 * 2): beyond enumeration the answer may be conservative,
    // never a false "no overlap".
    const gdn_tensor t = layout(kBase, {1, int64_t{1} << 12, int64_t{1} << 11, 1}, {4, 8, 12, 4});
    EXPECT_TRUE(self_overlaps(t));
}

TEST(TensorGeometry, RowCountsWhoseSumOverflowsAreTooManyToEnumerate) {
    // Each tensor's row count fits int64 (about 2^63 - 2^42 rows of a BF16 input that overlaps
    // itself, as inputs may, spanning a few MB), their sum does not: the answer is the
    // conservative true, not an overflowed count.
    const int64_t n = int64_t{1} << 21;
    const gdn_tensor q = layout(kBase + 4096, {1, n, n, n - 1}, {2, 2, 2, 2}, GDN_TYPE_BF16);
    const gdn_tensor states = layout(kBase, {1, 1, n, 2 * (n - 1)}, packed({1, 1, n, 2 * (n - 1)}));
    EXPECT_TRUE(overlaps(q, states));
    EXPECT_TRUE(overlaps(states, q));
}

TEST(TensorGeometry, HugeStridesDoNotOverflow) {
    const int64_t big = int64_t{1} << 40;
    EXPECT_FALSE(self_overlaps(layout(kBase, {4, 3, 2, 2}, {4, big, 4 * big, 16})));
    EXPECT_TRUE(self_overlaps(layout(kBase, {4, 3, 2, 2}, {4, big, 2 * big, 16})));  // i1 = 2 meets i2 = 1
}

TEST(TensorGeometry, SelfOverlapMatchesBruteForceOnRandomLayouts) {
    gdn::testkit::Random rng(12345);
    int overlapping = 0;
    for (int trial = 0; trial < 20000; ++trial) {
        std::array<int64_t, 4> ne{}, nb{};
        ne[0] = 1 + rng.below(3);
        nb[0] = 4;
        for (int d = 1; d < 4; ++d) {
            ne[d] = 1 + rng.below(3);
            nb[d] = 4 * (1 + rng.below(12));
        }
        const gdn_tensor t = layout(kBase, ne, nb);
        const bool expected = brute_self_overlaps(t);
        overlapping += expected;
        ASSERT_EQ(self_overlaps(t), expected) << "trial " << trial << ": ne = [" << ne[0] << "," << ne[1] << ","
                                              << ne[2] << "," << ne[3] << "] nb = [4," << nb[1] << "," << nb[2]
                                              << "," << nb[3] << "]";
    }
    // The sweep must exercise both answers.
    EXPECT_GT(overlapping, 1000);
    EXPECT_LT(overlapping, 19000);
}

// ---- overlap between two tensors ------------------------------------------------------------

TEST(TensorGeometry, DisjointAndTouchingRangesDoNotOverlap) {
    const gdn_tensor a = layout(kBase, {4, 3, 1, 1}, packed({4, 3, 1, 1}));
    EXPECT_FALSE(overlaps(a, layout(kBase + 48, {4, 3, 1, 1}, packed({4, 3, 1, 1}))));  // touching
    EXPECT_FALSE(overlaps(a, layout(kBase + 4096, {4, 3, 1, 1}, packed({4, 3, 1, 1}))));
    EXPECT_TRUE(overlaps(a, layout(kBase + 44, {4, 3, 1, 1}, packed({4, 3, 1, 1}))));  // one element shared
    EXPECT_TRUE(overlaps(a, a));
    // One byte of shared storage is enough: an F64 element straddling an F32 one.
    EXPECT_TRUE(overlaps(a, layout(kBase + 46, {1, 1, 1, 1}, {8, 8, 8, 8}, GDN_TYPE_F64)));
}

// q, k, v as row views into the packed conv_qkv_mix buffer of Qwen3.5-27B (SPEC section 3).
struct PackedQkv {
    gdn_tensor q, k, v;
};

PackedQkv packed_qkv(uintptr_t base, int64_t T, int64_t B) {
    const int64_t Sk = 128, Sv = 128, Hk = 16, Hv = 48, conv_dim = 2 * Hk * Sk + Hv * Sv;  // 10240
    const std::array<int64_t, 4> nb_qk = {4, 4 * Sk, 4 * conv_dim, 4 * conv_dim * T};
    const std::array<int64_t, 4> nb_v = {4, 4 * Sv, 4 * conv_dim, 4 * conv_dim * T};
    return {layout(base, {Sk, Hk, T, B}, nb_qk), layout(base + 4 * Hk * Sk, {Sk, Hk, T, B}, nb_qk),
            layout(base + 8 * Hk * Sk, {Sv, Hv, T, B}, nb_v)};
}

TEST(TensorGeometry, PackedModelViewsAreDisjoint) {
    for (int64_t T : {1, 7, 4096}) {
        const PackedQkv p = packed_qkv(kBase, T, 2);
        EXPECT_FALSE(overlaps(p.q, p.k)) << "T = " << T;
        EXPECT_FALSE(overlaps(p.k, p.v)) << "T = " << T;
        EXPECT_FALSE(overlaps(p.q, p.v)) << "T = " << T;
        EXPECT_FALSE(self_overlaps(p.q));
        EXPECT_FALSE(self_overlaps(p.v));
    }
    // Shifted by one element, k's first row reaches into q's last head.
    PackedQkv p = packed_qkv(kBase, 4096, 1);
    p.k.data = static_cast<char *>(p.k.data) - 4;
    EXPECT_TRUE(overlaps(p.q, p.k));
    // A view that covers a whole token row (all of q, k and v) overlaps each of them.
    const gdn_tensor whole = layout(kBase, {10240, 1, 4096, 1}, {4, 40960, 40960, 40960 * 4096});
    EXPECT_TRUE(overlaps(whole, p.v));
    EXPECT_TRUE(overlaps(p.q, whole));
}

TEST(TensorGeometry, InterleavedViewsAtACommonPeriod) {
    // Two views of 8-byte rows every 32 bytes: disjoint at offsets 0 and 8, 16, 24; meeting at 4.
    const std::array<int64_t, 4> ne = {2, 1, 50, 3}, nb = {4, 4, 32, 1600};
    const gdn_tensor a = layout(kBase, ne, nb);
    for (int offset : {8, 16, 24}) EXPECT_FALSE(overlaps(a, layout(kBase + offset, ne, nb))) << offset;
    EXPECT_TRUE(overlaps(a, layout(kBase + 4, ne, nb)));
    EXPECT_TRUE(overlaps(a, layout(kBase + 28, ne, nb)));  // wraps into the next period
    // The period may be the second view's stride only: a is one row.
    const gdn_tensor single = layout(kBase + 40, {2, 1, 1, 1}, {4, 4, 4, 4});
    EXPECT_FALSE(overlaps(single, a));
    EXPECT_TRUE(overlaps(layout(kBase + 36, {2, 1, 1, 1}, {4, 4, 4, 4}), a));
}

TEST(TensorGeometry, UnfoldableViewsAreEnumeratedExactly) {
    // a: 4-byte rows at 0, 16, 32. No common period folds these b's, so rows are enumerated.
    const gdn_tensor a = layout(kBase, {1, 3, 1, 1}, {4, 16, 64, 64});
    const gdn_tensor apart = layout(kBase + 4, {1, 2, 1, 1}, {4, 24, 64, 64});  // rows at 4, 28
    const gdn_tensor meet = layout(kBase + 4, {1, 2, 1, 1}, {4, 12, 64, 64});   // rows at 4, 16
    EXPECT_FALSE(brute_overlaps(a, apart));
    EXPECT_FALSE(overlaps(a, apart));
    EXPECT_FALSE(overlaps(apart, a));
    EXPECT_TRUE(overlaps(a, meet));
    EXPECT_TRUE(overlaps(meet, a));
}

TEST(TensorGeometry, OverlapBetweenTooManyRowsToEnumerateIsFound) {
    // Interleaved rows that no period folds, more than 2^22 in all, meeting at byte 16.
    const gdn_tensor a = layout(kBase, {1, int64_t{1} << 22, 1, 1}, {4, 16, 4, 4});
    const gdn_tensor b = layout(kBase + 4, {1, int64_t{1} << 21, 1, 1}, {4, 12, 4, 4});
    EXPECT_TRUE(overlaps(a, b));
}

TEST(TensorGeometry, HugeStridesFoldWithoutOverflow) {
    const int64_t big = int64_t{1} << 40;
    const gdn_tensor a = layout(kBase, {4, 1, 8, 2}, {4, 16, big, 8 * big});
    EXPECT_FALSE(overlaps(a, layout(kBase + 16, {4, 1, 8, 2}, {4, 16, big, 8 * big})));
    EXPECT_TRUE(overlaps(a, layout(kBase + 8, {4, 1, 8, 2}, {4, 16, big, 8 * big})));
    EXPECT_TRUE(overlaps(a, layout(kBase + 3 * big, {4, 1, 1, 1}, {4, 16, 16, 16})));
    EXPECT_FALSE(overlaps(a, layout(kBase + 3 * big + 16, {4, 1, 1, 1}, {4, 16, 16, 16})));
}

TEST(TensorGeometry, OverlapMatchesBruteForceOnRandomLayouts) {
    gdn::testkit::Random rng(777);
    int overlapping = 0;
    const int trials = 20000;
    for (int trial = 0; trial < trials; ++trial) {
        gdn_tensor t[2];
        for (gdn_tensor &x : t) {
            std::array<int64_t, 4> ne{}, nb{};
            ne[0] = 1 + rng.below(3);
            nb[0] = 4;
            // Strides from a few multiples of a shared period, so that folding is exercised.
            for (int d = 1; d < 4; ++d) {
                ne[d] = 1 + rng.below(3);
                nb[d] = rng.below(2) ? 16 * (1 + rng.below(4)) : 4 * (1 + rng.below(12));
            }
            x = layout(kBase + 4 * static_cast<uintptr_t>(rng.below(24)), ne, nb);
        }
        const bool expected = brute_overlaps(t[0], t[1]);
        overlapping += expected;
        ASSERT_EQ(overlaps(t[0], t[1]), expected) << "trial " << trial;
        ASSERT_EQ(overlaps(t[1], t[0]), expected) << "trial " << trial << " (swapped)";
    }
    EXPECT_GT(overlapping, trials / 20);
    EXPECT_LT(overlapping, trials - trials / 20);
}

// Value-major states (nb[1] = element size, dim 0 strided): the rows run along dim 1.
TEST(TensorGeometry, ValueMajorLayoutsMatchBruteForce) {
    gdn::testkit::Random rng(4242);
    int self_overlapping = 0, overlapping = 0;
    const int trials = 20000;
    for (int trial = 0; trial < trials; ++trial) {
        gdn_tensor t[2];
        for (gdn_tensor &x : t) {
            std::array<int64_t, 4> ne{}, nb{};
            for (int d = 0; d < 4; ++d) {
                ne[d] = 1 + rng.below(3);
                nb[d] = rng.below(2) ? 16 * (1 + rng.below(4)) : 4 * (1 + rng.below(12));
            }
            nb[1] = 4;
            if (rng.below(4) == 0) std::swap(nb[0], nb[1]);  // now and then a key-major one beside it
            x = layout(kBase + 4 * static_cast<uintptr_t>(rng.below(24)), ne, nb);
        }
        const bool self_expected = brute_self_overlaps(t[0]);
        self_overlapping += self_expected;
        ASSERT_EQ(self_overlaps(t[0]), self_expected) << "trial " << trial;
        const bool expected = brute_overlaps(t[0], t[1]);
        overlapping += expected;
        ASSERT_EQ(overlaps(t[0], t[1]), expected) << "trial " << trial;
        ASSERT_EQ(overlaps(t[1], t[0]), expected) << "trial " << trial << " (swapped)";
    }
    EXPECT_GT(self_overlapping, trials / 20);
    EXPECT_LT(self_overlapping, trials - trials / 20);
    EXPECT_GT(overlapping, trials / 20);
    EXPECT_LT(overlapping, trials - trials / 20);
}

// A pool's slots in either layout: disjoint from each other, and from a pool beside it.
TEST(TensorGeometry, PoolSlotsInEitherLayoutAreDisjoint) {
    const int64_t Sk = 128, Sv = 128, Hv = 48, slots = 64, area = 4 * Sk * Sv;
    const gdn_tensor value_major = layout(kBase, {Sk, Sv, Hv, slots}, {4 * Sv, 4, area, area * Hv});
    const gdn_tensor key_major = layout(kBase, {Sk, Sv, Hv, slots}, {4, 4 * Sk, area, area * Hv});
    EXPECT_FALSE(self_overlaps(value_major));
    EXPECT_FALSE(self_overlaps(key_major));
    gdn_tensor slot_a = value_major, slot_b = value_major;
    slot_a.ne[3] = slot_b.ne[3] = 1;
    slot_b.data = reinterpret_cast<void *>(kBase + area * Hv);
    EXPECT_FALSE(overlaps(slot_a, slot_b));
    EXPECT_TRUE(overlaps(value_major, key_major));
    gdn_tensor beside = value_major;
    beside.data = reinterpret_cast<void *>(kBase + area * Hv * slots);
    EXPECT_FALSE(overlaps(value_major, beside));
}

}  // namespace

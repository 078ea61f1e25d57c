// The row conversion kernels of cpu/typed_rows.h, each ISA the host runs, against the scalar
// definitions of src/math/elements.h: every one of the 65536 half values read, and floats written
// from every half value widened, random bit patterns, ties, NaN (quiet and signalling, both
// signs), Inf, subnormals and the edges of F16's range; at every length and alignment of a tail.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cpu/cache_control.h"
#include "cpu/typed_rows.h"
#include "math/elements.h"

namespace gdn::cpu {
namespace {

const char *const kIsas[] = {"avx512bf16", "avx512", "avx2", "generic"};

// Runs f once per kernel the host has, that kernel in use; the best one again afterwards.
template <class F>
void for_each_isa(F &&f) {
    const std::string best = typed_rows_isa();
    int ran = 0;
    for (const char *isa : kIsas) {
        if (!typed_rows_force_isa(isa)) continue;
        SCOPED_TRACE(isa);
        f(isa);
        ++ran;
    }
    EXPECT_TRUE(typed_rows_force_isa(best.c_str()));
    EXPECT_GE(ran, 1);
}

std::vector<uint16_t> every_half() {
    std::vector<uint16_t> h(65536);
    for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
    return h;
}

uint16_t scalar_store(gdn_type type, float x) { return type == GDN_TYPE_BF16 ? float_to_bf16(x) : float_to_f16(x); }
float scalar_load(gdn_type type, uint16_t h) { return type == GDN_TYPE_BF16 ? bf16_to_float(h) : f16_to_float(h); }

// Floats that exercise rounding to either half type.
std::vector<float> test_floats() {
    std::vector<float> x;
    for (uint32_t h = 0; h < 65536; ++h) {
        x.push_back(bf16_to_float(static_cast<uint16_t>(h)));
        x.push_back(f16_to_float(static_cast<uint16_t>(h)));
    }
    std::mt19937 rng(1);
    for (int i = 0; i < 200000; ++i) {
        const uint32_t u = rng();
        x.push_back(bits_float(u));                                // anything, NaN included
        x.push_back(bits_float((u & 0xffff0000u) | 0x8000u));       // bf16 ties
        x.push_back(bits_float((u & 0xffff0000u) | 0x7fffu));
        x.push_back(bits_float((u & 0xffff0000u) | 0x8001u));
        x.push_back(bits_float(u & 0x807fffffu));                   // float subnormals
        x.push_back(bits_float((u & 0x80000000u) | 0x7f800000u | (u & 0x007fffffu)));  // Inf, NaN
        const uint32_t f16_range = (u & 0x80000000u) | ((0x33000000u + (u % 0x14800000u)) & 0x7fffffffu);
        x.push_back(bits_float(f16_range));                          // 2^-25 .. beyond 65504
        x.push_back(bits_float((f16_range & 0xffffe000u) | 0x1000u));  // f16 ties (normal range)
    }
    for (float f : {65504.0f, 65519.996f, 65520.0f, 65536.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-14f, 0x1.ffcp-15f,
                    0x1.ffep-15f, 3.0e38f, -0.0f, 0.0f})
        for (float s : {1.0f, -1.0f}) x.push_back(s * f);
    return x;
}

TEST(CpuTypedRows, ReadsEveryHalfValueAsTheDefinition) {
    const std::vector<uint16_t> h = every_half();
    std::vector<float> out(h.size());
    for_each_isa([&](const char *) {
        for (gdn_type type : {GDN_TYPE_BF16, GDN_TYPE_F16}) {
            load_row(type, h.data(), static_cast<int64_t>(h.size()), out.data());
            int64_t bad = 0;
            for (size_t i = 0; i < h.size(); ++i)
                if (float_bits(out[i]) != float_bits(scalar_load(type, h[i])) && bad++ < 3)
                    ADD_FAILURE() << (type == GDN_TYPE_BF16 ? "bf16 " : "f16 ") << std::hex << h[i] << " -> " << float_bits(out[i]);
            EXPECT_EQ(bad, 0);
        }
    });
}

TEST(CpuTypedRows, WritesFloatsAsTheDefinition) {
    const std::vector<float> x = test_floats();
    std::vector<uint16_t> out(x.size());
    for_each_isa([&](const char *) {
        for (gdn_type type : {GDN_TYPE_BF16, GDN_TYPE_F16}) {
            store_row(type, x.data(), static_cast<int64_t>(x.size()), out.data());
            int64_t bad = 0;
            for (size_t i = 0; i < x.size(); ++i)
                if (out[i] != scalar_store(type, x[i]) && bad++ < 3)
                    ADD_FAILURE() << (type == GDN_TYPE_BF16 ? "bf16 " : "f16 ") << std::hex << float_bits(x[i]) << " -> " << out[i]
                                  << ", expected " << scalar_store(type, x[i]);
            EXPECT_EQ(bad, 0);
        }
    });
}

// Every length up to a few vectors at every alignment of a 64-byte line: the tails, and the
// streamed whole lines of stream_store_row, touch exactly the row.
TEST(CpuTypedRows, TailsAndStreamedLinesWriteExactlyTheRow) {
    const std::vector<float> x = test_floats();
    for_each_isa([&](const char *) {
        for (gdn_type type : {GDN_TYPE_BF16, GDN_TYPE_F16}) {
            alignas(64) uint16_t dst[160];
            alignas(64) float back[160];
            for (int64_t offset = 0; offset < 32; ++offset)
                for (int64_t n = 0; n <= 100; ++n) {
                    const float *src = x.data() + 1000 + 7 * n + offset;
                    for (int streamed = 0; streamed < 2; ++streamed) {
                        std::fill(std::begin(dst), std::end(dst), uint16_t(0xABCD));
                        if (streamed) stream_store_row(type, src, n, dst + offset);
                        else store_row(type, src, n, dst + offset);
                        stream_fence();
                        for (int64_t i = 0; i < 160; ++i) {
                            const bool inside = i >= offset && i < offset + n;
                            const uint16_t want = inside ? scalar_store(type, src[i - offset]) : uint16_t(0xABCD);
                            ASSERT_EQ(dst[i], want) << "n " << n << " offset " << offset << " i " << i << " streamed " << streamed;
                        }
                    }
                    std::fill(std::begin(back), std::end(back), -1.0f);
                    load_row(type, dst + offset, n, back + offset);
                    for (int64_t i = 0; i < 160; ++i) {
                        const bool inside = i >= offset && i < offset + n;
                        ASSERT_EQ(float_bits(back[i]), float_bits(inside ? scalar_load(type, dst[i]) : -1.0f)) << n << " " << offset;
                    }
                }
        }
    });
}

TEST(CpuTypedRows, F32RowsAreCopied) {
    const std::vector<float> x = test_floats();
    std::vector<float> out(1000);
    load_row(GDN_TYPE_F32, x.data(), 1000, out.data());
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(float_bits(out[i]), float_bits(x[i]));
    std::vector<float> streamed(1000);
    stream_store_row(GDN_TYPE_F32, x.data(), 1000, streamed.data());
    stream_fence();
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(float_bits(streamed[i]), float_bits(x[i]));
}

}  // namespace
}  // namespace gdn::cpu

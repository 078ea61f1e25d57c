// The sizes of a model shape that decide the op's cases, compared field by field: what a shape
// read from GGUF metadata or a Hugging Face config must share with the preset it describes.
#pragma once

#include <gtest/gtest.h>

#include "gguf/model_shape.h"

namespace gdn::gguf {

inline void expect_same_op_shape(const ModelShape &got, const ModelShape &want) {
    EXPECT_EQ(got.Sk, want.Sk);
    EXPECT_EQ(got.Sv, want.Sv);
    EXPECT_EQ(got.Hk, want.Hk);
    EXPECT_EQ(got.Hv, want.Hv);
    EXPECT_EQ(got.conv_dim, want.conv_dim);
    EXPECT_EQ(got.conv_kernel, want.conv_kernel);
    EXPECT_EQ(got.block_count, want.block_count);
    EXPECT_EQ(got.delta_net_layers, want.delta_net_layers);
}

}  // namespace gdn::gguf

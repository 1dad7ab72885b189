#pragma once
// The data-parallel tests' transformer: vocab 11 (its embedding's rows do
// not divide by 2 or 3), width 8, 2 heads of 4, SwiGLU 12, every layer
// recomputed, dropout on; and its inputs.
#include <cstddef>

#include <ctg/ctg.hpp>

namespace test_util {

template <std::size_t Layers>
struct tiny_transformer_config {
  static constexpr ctg::dim_t vocab = 11, max_seq = 6, dim = 8, heads = 2, head_dim = 4, hidden = 12;
  static constexpr std::size_t layers = Layers;
  static constexpr ctg::nn::checkpointing checkpoint = ctg::nn::checkpointing::every_layer;
  static constexpr double dropout = 0.2;
};
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;

}  // namespace test_util

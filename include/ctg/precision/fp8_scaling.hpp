#pragma once
// FP8 scaling recipes: the types a user names to pick how a tensor's scale is
// found (DESIGN.md, "Numerics"). The scalar math they run (scale from amax,
// the delayed-scaling history update, quantize / dequantize of one value) is
// core/fp8_scaling.hpp, re-exported here as ctg::precision::*.
//
//   precision::delayed<History, Margin, Algo>   TransformerEngine's delayed scaling
//   precision::current<Margin>                  torchao's tensorwise (current) scaling
#include <cstddef>

#include <ctg/core/dtype_traits.hpp>
#include <ctg/core/fp8_scaling.hpp>

namespace ctg::precision {

using fp8_scaling::amax_algo;
using fp8_scaling::current_scale;
using fp8_scaling::delayed_update;
using fp8_scaling::dequantize;
using fp8_scaling::quantize;
using fp8_scaling::scale_from_amax;

// Delayed scaling recipe (TE defaults: history 1024, margin 0, algo max).
template <std::size_t History = 1024, int Margin = 0, amax_algo Algo = amax_algo::max>
struct delayed {
  static_assert(History >= 1, "ctg: delayed scaling needs an amax history of at least 1");
  static constexpr std::size_t history = History;
  static constexpr int margin = Margin;
  static constexpr amax_algo algo = Algo;
};

// Current (per-tensor dynamic) scaling: the scale comes from this tensor's
// amax in this step.
template <int Margin = 0>
struct current {
  static constexpr int margin = Margin;
};

template <class Fmt>
  requires is_fp8_v<Fmt>
inline constexpr float fp8_max_v = dtype_traits<Fmt>::max;  // 448 (e4m3), 57344 (e5m2)

}  // namespace ctg::precision

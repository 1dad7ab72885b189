#pragma once
// FP8 scaling recipes: the types a user names to pick how a tensor's scale is
// found (DESIGN.md, "Numerics"). The scalar math they run (scale from amax,
// the delayed-scaling history update, quantize / dequantize of one value) is
// core/fp8_scaling.hpp, re-exported here as ctg::precision::*.
//
//   precision::delayed<History, Margin, Algo, Formats>   TransformerEngine's delayed scaling
//   precision::current<Margin, Formats>                  torchao's tensorwise (current) scaling
//
// A recipe also fixes the fp8 formats of the products it scales (Formats):
//   precision::hybrid     e4m3 activations and weights, e5m2 gradients (the default; TE's HYBRID)
//   precision::all_e4m3   e4m3 everywhere (TE's E4M3)
// Forward operands in e5m2 are not legal in these per-tensor recipes (as TE
// rejects pure-E5M2 training). graph/fp8.hpp checks every fp8_matmul
// against its recipes: operands in the forward format, the gradient's
// recipe of the same formats. (Block recipes, MXFP8 style, when they come,
// take all_e4m3 only.)
#include <cstddef>
#include <type_traits>

#include <ctg/core/dtype_traits.hpp>
#include <ctg/core/fp8_scaling.hpp>

namespace ctg::precision {

using fp8_scaling::amax_algo;
using fp8_scaling::current_scale;
using fp8_scaling::delayed_update;
using fp8_scaling::dequantize;
using fp8_scaling::quantize;
using fp8_scaling::scale_from_amax;

// The fp8 formats of a product: its forward operands, and its incoming gradient in backward.
template <class Forward, class Gradient>
struct fp8_formats {
  static_assert(is_fp8_v<Forward> && is_fp8_v<Gradient>, "ctg: fp8 formats are ctg::e4m3 or ctg::e5m2");
  using forward = Forward;
  using gradient = Gradient;
};
using hybrid = fp8_formats<e4m3, e5m2>;
using all_e4m3 = fp8_formats<e4m3, e4m3>;

}  // namespace ctg::precision

namespace ctg::detail {
// The formats a per-tensor recipe takes: forward e4m3, gradients e4m3 or e5m2.
// (Reports a mistake itself and returns true, so the caller adds no error.)
template <class Formats>
consteval bool check_per_tensor_formats() {
  static_assert(std::is_same_v<typename Formats::forward, e4m3>,
                "ctg: fp8 format: a per-tensor recipe quantizes forward operands (activations, weights) to "
                "e4m3; e5m2 forward products are not supported: use precision::hybrid (e4m3 forward, e5m2 "
                "gradients) or precision::all_e4m3");
  return true;
}
}  // namespace ctg::detail

namespace ctg::precision {

// Delayed scaling recipe (TE defaults: history 1024, margin 0, algo max, HYBRID formats).
template <std::size_t History = 1024, int Margin = 0, amax_algo Algo = amax_algo::max, class Formats = hybrid>
struct delayed {
  static_assert(History >= 1, "ctg: delayed scaling needs an amax history of at least 1");
  static_assert(detail::check_per_tensor_formats<Formats>());
  static constexpr std::size_t history = History;
  static constexpr int margin = Margin;
  static constexpr amax_algo algo = Algo;
  using formats = Formats;
};

// Current (per-tensor dynamic) scaling: the scale comes from this tensor's
// amax in this step.
template <int Margin = 0, class Formats = hybrid>
struct current {
  static_assert(detail::check_per_tensor_formats<Formats>());
  static constexpr int margin = Margin;
  using formats = Formats;
};

template <class Fmt>
  requires is_fp8_v<Fmt>
inline constexpr float fp8_max_v = dtype_traits<Fmt>::max;  // 448 (e4m3), 57344 (e5m2)

}  // namespace ctg::precision

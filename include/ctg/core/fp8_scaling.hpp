#pragma once
// Per-tensor FP8 scaling math (DESIGN.md, "Numerics"). An FP8 value is a pair
// (payload, f32 scale) with real = payload / scale; kernels also keep
// scale_inv = 1 / scale, or NaN when the tensor's amax is not finite
// (scale_inv_of). This header holds the scalar rules only: scale from
// amax, the delayed-scaling history update, and the quantize / dequantize of
// one value. Host and device share it; every backend calls it. The recipes a
// user names (precision::delayed<>, precision::current<>) are in
// precision/fp8_scaling.hpp, which also re-exports these functions.
//
// Delayed scaling follows TransformerEngine (TE), read in
// transformer_engine/common/recipe/delayed_scaling.cu (kernels `kernel` and
// `kernel_bulk`) and transformer_engine/pytorch/fp8.py (`_update_amax_history`,
// `_default_get_amax_and_update_history`, `_default_sf_compute`). Per step TE:
//   1. takes amax from the history *before* rolling it: the max over all H
//      slots (slot 0 = this step's amax) for "max", slot 0 for "most_recent";
//   2. scale = (fp8_max * 2^-margin) / amax if amax is finite and > 0, else the
//      previous scale; a scale that came out infinite (tiny amax) becomes
//      FLT_MAX;
//   3. rolls the history as torch.roll(h, -1): new[i] = old[i+1],
//      new[H-1] = old[0]; then zeroes new slot 0 (it held old[1], the oldest
//      amax, which drops out). So the history always holds the last H amaxes.
// The max in TE's CUDA kernels is fmaxf, which skips NaN; we do the same (TE's
// unfused torch.max path would propagate a NaN and freeze the scale for H
// steps instead). TE's bulk kernel (the fused default after the amax
// all-reduce) skips the whole update, roll included, when this step's amax is
// exactly 0; the per-tensor kernel and the Python path roll as above, and so
// does delayed_update here.
//
// Current scaling follows torchao "tensorwise" (float8_utils.amax_to_scale):
// scale = fp8_max / max(amax, 1e-12), computed in f64 and rounded to f32.

#include <cstddef>

#include <ctg/core/config.hpp>
#include <ctg/core/dtype_traits.hpp>
#include <ctg/core/float_bits.hpp>

CTG_HOT_BEGIN

namespace ctg::fp8_scaling {

enum class amax_algo { max, most_recent };

CTG_HD constexpr bool is_finite(float x) noexcept {
  return (ctg::detail::f32_bits(x) & 0x7F800000u) != 0x7F800000u;
}

// 2^e exactly (for the small margins in use), by repeated exact doubling or halving.
CTG_HD constexpr float pow2(int e) noexcept {
  float r = 1.0f;
  for (; e > 0; --e) r *= 2.0f;
  for (; e < 0; ++e) r *= 0.5f;
  return r;
}

// The amax of two parts of one tensor, from theirs: the larger, and NaN when
// either is NaN (a quantize loop keeps a NaN it meets, so the amax of the
// whole tensor is NaN too). Amaxes are >= 0, so 0 is "nothing seen yet".
// A NaN is the canonical one (0x7FFFFFFF) whatever its payload: the amax
// is then the same bits in any order of the parts (a GPU's blocks combine
// theirs by the max of the bit patterns, the CPU in element order; it kept
// the last NaN's payload, and the state file recorded it).
CTG_HD constexpr float amax_combine(float amax, float part) noexcept {
  if (part != part) return detail::f32_from_bits(detail::f32_canonical_nan_bits);
  return part > amax ? part : amax;
}

// scale = fp8_max / amax / 2^margin, or `previous` when amax is not finite or
// not > 0 (nothing to learn from it). Computed as TE's kernels do,
// (fp8_max * 2^-margin) / amax: the first product is exact, so one rounding.
// An infinite result (amax tiny) becomes FLT_MAX, as in TE.
CTG_HD constexpr float scale_from_amax(float amax, float fp8_max, int margin, float previous) noexcept {
  float s = (is_finite(amax) && amax > 0.0f) ? (fp8_max * pow2(-margin)) / amax : previous;
  if (!is_finite(s) && s == s) s = dtype_traits<f32>::max;
  return s;
}

// Delayed-scaling update after a step; history[0] holds this step's amax.
// Steps 1-3 of the header comment, in that order. NaN slots are skipped by the
// max (as fmaxf), +inf is not (the scale is then kept while it stays in the
// history). Afterwards slot 0 is 0, ready for the next step's amax.
CTG_HD constexpr void delayed_update(float* history, std::size_t length, float& scale, float fp8_max,
                                     int margin, amax_algo algo) noexcept {
  if (length == 0) return;
  float amax = history[0];
  if (algo == amax_algo::max) {
    amax = 0.0f;
    for (std::size_t i = 0; i < length; ++i) {
      if (history[i] > amax) amax = history[i];  // false for NaN: skipped
    }
  }
  scale = scale_from_amax(amax, fp8_max, margin, scale);
  const float first = history[0];
  for (std::size_t i = 0; i + 1 < length; ++i) history[i] = history[i + 1];
  history[length - 1] = first;
  history[0] = 0.0f;
}

// The scale_inv a quantized tensor is read back with: 1 / scale, or NaN
// when its amax is not finite. Under delayed scaling the cast saturates an
// inf to the format's max (as TransformerEngine's does), so a product, and a
// gradient through it, came out finite from an inf, and a step whose
// backward overflowed went past AdamW's check of the gradients. So every
// value of such a tensor reads back NaN, as under current scaling, whose
// scale is then NaN or 0 anyway. (The history still records the amax, as
// TE's.)
CTG_HD constexpr float scale_inv_of(float amax, float scale) noexcept {
  return is_finite(amax) ? 1.0f / scale : detail::f32_from_bits(detail::f32_canonical_nan_bits);
}

// Current scaling, torchao tensorwise: fp8_max / clamp(amax, min=1e-12) in f64,
// then rounded to f32; divided by 2^margin. A NaN amax gives a NaN scale (as
// torch.clamp propagates NaN), an infinite one 0: either way every value of
// the tensor dequantizes to NaN, so a non-finite input is never trained on
// as a saturated finite one.
CTG_HD constexpr float current_scale(float amax, float fp8_max, int margin) noexcept {
  const double a = static_cast<double>(amax) < 1e-12 ? 1e-12 : static_cast<double>(amax);
  return static_cast<float>(static_cast<double>(fp8_max) / a) * pow2(-margin);
}

// The payload of x under `scale`: x * scale (one f32 rounding) rounded to Fmt,
// nearest even, saturating to +-max (NaN stays NaN).
template <class Fmt>
  requires is_fp8_v<Fmt>
CTG_HD constexpr Fmt quantize(float x, float scale) noexcept {
  return from_float<Fmt>(x * scale);
}

// The real value of a payload: payload * scale_inv (the payload converts exactly).
template <class Fmt>
  requires is_fp8_v<Fmt>
CTG_HD constexpr float dequantize(Fmt q, float scale_inv) noexcept {
  return to_float(q) * scale_inv;
}

}  // namespace ctg::fp8_scaling

CTG_HOT_END

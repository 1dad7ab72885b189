#pragma once
// FP8 on the CPU: quantize (the amax and the cast of one tensor, with the
// scale its recipe gives) and dequantize. A quantized buffer holds the
// payload, then its side data (exec/buffers.hpp): amax, scale, scale_inv.
//
//   ctg::cpu::run_quantize<TX, Fmt, Delayed, Margin>(call, bindings, workspace, amax_out);
//       amax_out: where this run's amax goes (delayed scaling), or null;
//       call.child: the tensor, then (delayed) its scale leaf
//   ctg::cpu::run_dequantize<Fmt, T>(call, bindings, workspace, nullptr);
#include <cmath>

#include <ctg/core/config.hpp>
#include <ctg/core/fp8_scaling.hpp>
#include <ctg/exec/bindings.hpp>
#include <ctg/exec/buffers.hpp>
#include <ctg/exec/cpu/workspace.hpp>
#include <ctg/lower/group.hpp>

CTG_HOT_BEGIN

namespace ctg::cpu {

// Delayed scaling casts with the stored scale while it takes the amax (one
// loop); current scaling takes the amax first, then the scale from it.
template <class TX, class Fmt, bool Delayed, int Margin>
void run_quantize(const group_call& g, const bindings_view& b, workspace&, float* amax_out) {
  const std::size_t ix = g.child[0], R = g.root;
  const std::size_t n = static_cast<std::size_t>(b.shape[R].numel());
  const TX* x = b.template as<const TX>(ix);
  Fmt* q = b.template as<Fmt>(R);
  float amax = 0.0f;
  // (a NaN or inf amax: delayed scaling keeps its scale, current scaling's
  // is NaN or 0, as torchao's; either way the tensor reads back as NaN,
  // fp8_scaling::scale_inv_of, and a checked loss, or AdamW's check, fails)
  auto take = [&](float v) { amax = fp8_scaling::amax_combine(amax, std::fabs(v)); };
  float scale = 1.0f;
  if constexpr (Delayed) {
    scale = *b.template as<const float>(g.child[1]);
    for (std::size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(load_as<TX>(x[i]));
      take(v);
      q[i] = fp8_scaling::quantize<Fmt>(v, scale);
    }
    if (amax_out) *amax_out = amax;
  } else {
    for (std::size_t i = 0; i < n; ++i) take(static_cast<float>(load_as<TX>(x[i])));
    scale = fp8_scaling::current_scale(amax, dtype_traits<Fmt>::max, Margin);
    for (std::size_t i = 0; i < n; ++i) q[i] = fp8_scaling::quantize<Fmt>(static_cast<float>(load_as<TX>(x[i])), scale);
  }
  fp8_side_data* side = fp8_side(b, R);
  side->amax = amax;
  side->scale = scale;
  side->scale_inv = fp8_scaling::scale_inv_of(amax, scale);
}

template <class Fmt, class T>
void run_dequantize(const group_call& g, const bindings_view& b, workspace&, float*) {
  const std::size_t iq = g.child[0], R = g.root;
  const std::size_t n = static_cast<std::size_t>(b.shape[R].numel());
  const Fmt* q = b.template as<const Fmt>(iq);
  const float scale_inv = fp8_side(b, iq)->scale_inv;
  T* out = b.template as<T>(R);
  for (std::size_t i = 0; i < n; ++i) out[i] = store_as<T>(fp8_scaling::dequantize<Fmt>(q[i], scale_inv));
}

}  // namespace ctg::cpu

CTG_HOT_END

// Seed bug B2 (RMSNorm computed in f32 inside a bf16 model, with gradient checkpointing):
// in PyTorch, after `x.to(float32)` the tensor no longer required grad and backward
// failed at run time with "element 0 of tensors does not require grad".
//
// In ctg, cast<f32> is a differentiable node: requires_grad of the cast equals that of
// its input. So the only way to get "does not require grad" is for it to be true: here
// the model's only weight is frozen, the norm sees inputs only, and differentiating the
// loss is a compile error at the value_and_grad call, not a crash in backward.
// The corrected twin makes the projection trainable: the same f32 norm after the same
// cast now requires grad (checked below) and differentiates fine.
// expect-error: ctg: loss does not require grad
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::bf16, ctg::dyn, 64>;
using Gain = ctg::frozen<"norm.gain", ctg::f32, 64>;
#ifndef CTG_CORRECTED
using Proj = ctg::frozen<"proj.w", ctg::bf16, 64, 64>;  // the mistake: nothing trainable before the norm
#else
using Proj = ctg::param<"proj.w", ctg::bf16, 64, 64>;
#endif

// RMSNorm in f32 on a bf16 activation, result back in bf16.
template <class In>
auto rmsnorm_f32(In x) {
  auto xf = ctg::cast<ctg::f32>(x);
  auto normed = xf * ctg::rsqrt(ctg::mean<-1>(ctg::square(xf)) + ctg::lit<1e-6>) * Gain{};
  return ctg::cast<ctg::bf16>(normed);
}

int main() {
  auto h = ctg::matmul(X{}, Proj{});
  auto loss = ctg::mean(ctg::square(ctg::cast<ctg::f32>(rmsnorm_f32(h))));
#ifdef CTG_CORRECTED
  // The cast keeps grad-ness: the f32 copy of a grad-carrying bf16 activation carries grad.
  static_assert(ctg::requires_grad_v<decltype(h)>);
  static_assert(ctg::requires_grad_v<decltype(ctg::cast<ctg::f32>(h))>);
  static_assert(ctg::requires_grad_v<decltype(rmsnorm_f32(h))>);
  static_assert(ctg::has_grad_path_v<decltype(loss), Proj>);
#endif
  auto step = ctg::value_and_grad(loss, ctg::wrt<Proj>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

// Seed bug B1 (FP8 linear layer wrapping its weight for FSDP float8 all-gather): wrapping a
// frozen weight in a new parameter object silently reset "requires grad" to true.
//
// In ctg grad-ness is part of a leaf's type and flows through every wrapper unchanged: the
// frozen base weight stays frozen after cast<bf16> (checked below), gets no gradient
// buffer, and asking for its gradient does not compile.
// The corrected twin asks only for the trainable adapter's gradients.
// expect-error: ctg: frozen parameter
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::bf16, ctg::dyn, 64>;
using Base = ctg::frozen<"base.w", ctg::f32, 64, 64>;  // pretrained, frozen
using A = ctg::param<"lora.a", ctg::f32, 64, 8>;
using Bm = ctg::param<"lora.b", ctg::f32, 8, 64>;

int main() {
  auto base_lp = ctg::cast<ctg::bf16>(Base{});  // the wrapper: low-precision copy for the all-gather
  static_assert(!ctg::requires_grad_v<decltype(base_lp)>);
  static_assert(std::is_same_v<ctg::params_t<decltype(ctg::sum(base_lp))>, ctg::tl::list<>>);
  auto y = ctg::matmul(X{}, base_lp) +
           ctg::matmul(ctg::matmul(X{}, ctg::cast<ctg::bf16>(A{})), ctg::cast<ctg::bf16>(Bm{}));
  auto loss = ctg::mean(ctg::square(ctg::cast<ctg::f32>(y)));
#ifndef CTG_CORRECTED
  auto step = ctg::value_and_grad(loss, ctg::wrt<Base, A, Bm>);  // the mistake
#else
  auto step = ctg::value_and_grad(loss, ctg::wrt<A, Bm>);
  static_assert(std::is_same_v<ctg::params_t<decltype(loss)>, ctg::tl::list<A, Bm>>);
#endif
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

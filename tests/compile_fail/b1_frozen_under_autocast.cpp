// Seed bug B1, through a layer and a precision policy: a frozen pretrained
// projection inside nn::linear under autocast<bf16>. The policy inserts a cast
// to bf16 (a "wrapper"); the weight stays frozen through it, has no optimizer
// state, and asking for its gradient does not compile.
// The corrected twin trains only the adapter on top.
// expect-error: ctg: frozen parameter
// expect-error-count: 1
#include <ctg/ctg.hpp>

using P = ctg::precision::autocast<ctg::bf16>;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using Base = ctg::frozen<"base.weight", ctg::f32, 16, 16>;  // what nn::linear<..., leaf_role::frozen> declares

int main() {
  auto h = ctg::nn::linear<"base", 16, P, ctg::nn::bias::none, ctg::leaf_role::frozen>(X{});
  static_assert(!ctg::requires_grad_v<decltype(h)>);
  auto y = h + ctg::nn::linear<"adapter", 16, P>(X{});
  auto loss = ctg::mean(ctg::square(ctg::cast<ctg::f32>(y)));
  using Adapter = ctg::param<"adapter.weight", ctg::f32, 16, 16>;
  static_assert(std::is_same_v<ctg::params_t<decltype(loss)>, ctg::tl::list<Adapter>>);
#ifndef CTG_CORRECTED
  auto step = ctg::value_and_grad(loss, ctg::wrt<Base, Adapter>);  // the mistake
#else
  auto step = ctg::value_and_grad(loss, ctg::wrt<Adapter>);
#endif
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

// Seed bug B1, the FP8 way: a frozen pretrained weight wrapped for FP8
// (quantized, with its own delayed-scaling state). The wrapper keeps the
// weight frozen: it requires no grad, gets no optimizer state, and asking for
// its gradient does not compile. The corrected twin trains only the adapter.
// expect-error: ctg: frozen parameter
// expect-error-count: 1
#include <ctg/ctg.hpp>

namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using Base = ctg::frozen<"base.weight", ctg::f32, 16, 16>;
using Adapter = ctg::param<"adapter.weight", ctg::f32, 16, 16>;
using SX = ctg::scaling::delayed<"base.fp8.input", pr::delayed<>>;
using SW = ctg::scaling::delayed<"base.fp8.weight", pr::delayed<>>;
using SG = ctg::scaling::delayed<"base.fp8.grad", pr::delayed<>>;

int main() {
  auto wq = ctg::quantize<ctg::e4m3, SW>(Base{});
  static_assert(!ctg::requires_grad_v<decltype(wq)>);
  auto h = ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<ctg::e4m3, SX>(X{}), wq);
  auto loss = ctg::mean(ctg::square(h + ctg::matmul(X{}, Adapter{})));
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

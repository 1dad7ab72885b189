// Item 6 of issue 15: quantizers that name one delayed-scaling state update
// it together (once per step, from the max of their amaxes), so they must
// agree on what it is: here two products name the state "x.fp8" with
// different margins, which must not compile. The corrected twin gives the
// second product a state of its own.
// expect-error: ctg: one fp8 scaling state, two meanings
// expect-note: ; Scaling = [^ ]*"x.fp8"}, [^ ]*delayed<16, 1 ?>
// expect-note: FirstScaling = [^ ]*"x.fp8"}, [^ ]*delayed<16, 0 ?>
// expect-error-count: 1
#include <ctg/ctg.hpp>

namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;
using SX = ctg::scaling::delayed<"x.fp8", pr::delayed<16, 0>>;
#ifndef CTG_CORRECTED
using SX2 = ctg::scaling::delayed<"x.fp8", pr::delayed<16, 1>>;  // the mistake: same name, another margin
#else
using SX2 = ctg::scaling::delayed<"x2.fp8", pr::delayed<16, 1>>;
#endif
using SW = ctg::scaling::delayed<"w.fp8", pr::delayed<16, 0>>;
using SG = ctg::scaling::delayed<"g.fp8", pr::delayed<16, 0>>;

int main() {
  auto wq = ctg::quantize<ctg::e4m3, SW>(W{});
  auto a = ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<ctg::e4m3, SX>(X{}), wq);
  auto b = ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<ctg::e4m3, SX2>(ctg::tanh(X{})), wq);
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(a + b)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

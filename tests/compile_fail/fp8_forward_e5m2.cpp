// Item 8 of issue 15: the fp8 formats of a product belong to its recipe. An
// all-e5m2 forward product (both operands quantized to e5m2) under a recipe
// whose forward format is e4m3 (precision::hybrid, the default) must not
// compile. The corrected twin quantizes the operands to e4m3.
// expect-error: ctg: fp8 format: an fp8_matmul operand is not in its recipe's forward format
// expect-error-count: 1
#include <ctg/ctg.hpp>

namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;
using SX = ctg::scaling::delayed<"w.fp8.input", pr::delayed<>>;
using SW = ctg::scaling::delayed<"w.fp8.weight", pr::delayed<>>;
using SG = ctg::scaling::delayed<"w.fp8.grad", pr::delayed<>>;

int main() {
#ifndef CTG_CORRECTED
  using F = ctg::e5m2;  // the mistake
#else
  using F = ctg::e4m3;
#endif
  auto h = ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<F, SX>(X{}), ctg::quantize<F, SW>(W{}));
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(h)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

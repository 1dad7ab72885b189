// Item 8 of issue 15: the fp8 formats of a product belong to its recipe. The
// operands follow precision::hybrid (gradients in e5m2); a gradient scaling
// whose recipe says precision::all_e4m3 would quantize the gradient to e4m3:
// the product's recipes disagree, which must not compile. The corrected twin
// gives the gradient the operands' recipe.
// expect-error: ctg: fp8 format: the gradient's recipe has other formats than the operands'
// expect-error-count: 1
#include <ctg/ctg.hpp>

namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;
using Hybrid = pr::current<>;
using SX = ctg::scaling::current<Hybrid>;
#ifndef CTG_CORRECTED
using SG = ctg::scaling::current<pr::current<0, pr::all_e4m3>>;  // the mistake
#else
using SG = ctg::scaling::current<Hybrid>;
#endif

int main() {
  auto h = ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<ctg::e4m3, SX>(X{}), ctg::quantize<ctg::e4m3, SX>(W{}));
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(h)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

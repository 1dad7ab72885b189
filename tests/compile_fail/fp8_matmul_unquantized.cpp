// fp8_matmul multiplies fp8 tensors: an operand that is not quantized (here
// the weight, as docs/diagnostics.md's example) must not compile, with the
// one ctg: error first (it came fourth, after an error inside the recipe
// check that read the operand's scaling). The corrected twin quantizes it.
// expect-error: ctg: fp8_matmul multiplies quantized tensors
// expect-error-count: 1
#include <ctg/ctg.hpp>

namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;
using S = ctg::scaling::current<pr::current<>>;

int main() {
  auto x = ctg::quantize<ctg::e4m3, S>(X{});
#ifndef CTG_CORRECTED
  auto h = ctg::fp8_matmul<ctg::f32, S>(x, W{});  // the mistake
#else
  auto h = ctg::fp8_matmul<ctg::f32, S>(x, ctg::quantize<ctg::e4m3, S>(W{}));
#endif
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(h)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

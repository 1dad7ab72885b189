// dequantize reads an fp8 tensor: dequantize of a plain tensor must not
// compile, with one error (a second one came from inside the CPU backend).
// The corrected twin quantizes first.
// expect-error: ctg: dequantize takes a quantized tensor
// expect-error-count: 1
#include <ctg/ctg.hpp>

namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16>;
using S = ctg::scaling::current<pr::current<>>;

int main() {
#ifndef CTG_CORRECTED
  auto y = ctg::dequantize<ctg::f32>(X{} * W{});  // the mistake
#else
  auto y = ctg::dequantize<ctg::f32>(ctg::quantize<ctg::e4m3, S>(X{} * W{}));
#endif
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

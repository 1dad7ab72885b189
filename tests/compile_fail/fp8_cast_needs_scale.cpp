// Compile-fail pair: casting a tensor to fp8 would drop the scale every fp8
// value needs (real = payload / scale). The corrected twin quantizes it with
// a scaling recipe, and reads it back with dequantize.
// expect-error: ctg: fp8 needs a scale
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using Scaling = ctg::scaling::current<ctg::precision::current<>>;

int main() {
#ifndef CTG_CORRECTED
  auto y = ctg::cast<ctg::f32>(ctg::cast<ctg::e4m3>(X{}));
#else
  auto y = ctg::dequantize<ctg::f32>(ctg::quantize<ctg::e4m3, Scaling>(X{}));
#endif
  auto step = ctg::forward(y);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

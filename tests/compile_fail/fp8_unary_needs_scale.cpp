// Compile-fail pair: a unary op or a reduction of an fp8 payload means
// nothing without its scale. (Only binary ops and casts were checked:
// sum(exp(w8)) of an e4m3 leaf compiled and ran on the bare payload.)
// The corrected twin quantizes an f32 weight and reads it back with its
// scale. The error is reported once: the sum of the failed exp adds none.
// expect-error: ctg: fp8 needs a scale
// expect-error-count: 1
#include <ctg/ctg.hpp>

using Scaling = ctg::scaling::current<ctg::precision::current<>>;

int main() {
#ifndef CTG_CORRECTED
  using W8 = ctg::param<"w8", ctg::e4m3, 2, 2>;
  auto e = ctg::sum(ctg::exp(W8{}));
#else
  using W = ctg::param<"w", ctg::f32, 2, 2>;
  auto e = ctg::sum(ctg::exp(ctg::dequantize<ctg::f32>(ctg::quantize<ctg::e4m3, Scaling>(W{}))));
#endif
  auto step = ctg::forward(e);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

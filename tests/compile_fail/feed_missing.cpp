// Compile-fail pair: a step run without the feed of an input it reads. Which
// inputs are fed is known from the feeds' types, so this is a compile error at
// the user's call, naming the input in the note (L = ...{"y"}...), not a
// ctg::error at run time. The corrected twin feeds both inputs.
// expect-error: ctg: missing feed for an input this step reads
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using Y = ctg::input<"y", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;

int main() {
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{} + Y{}, W{}))), ctg::wrt<W>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::vector<float> x(2 * 8, 0.5f), y(2 * 8, 0.25f);
#ifndef CTG_CORRECTED
  float l = step(store, ctg::feed<X>(x, 2));  // the mistake: y is not fed
#else
  float l = step(store, ctg::feed<X>(x, 2), ctg::feed<Y>(y, 2));
#endif
  (void)l;
}

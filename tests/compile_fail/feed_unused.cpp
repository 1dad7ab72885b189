// Compile-fail pair: a feed for an input the step does not read (here the
// targets of another loss): it would be ignored without a word. The corrected
// twin feeds only what the step reads. store.plan(...) checks the same.
// expect-error: ctg: a feed for an input this step does not read
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using T = ctg::input<"targets", ctg::f32, ctg::dyn, 4>;
using W = ctg::param<"w", ctg::f32, 8, 4>;

int main() {
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{}, W{}))), ctg::wrt<W>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::vector<float> x(2 * 8, 0.5f), t(2 * 4, 1.0f);
#ifndef CTG_CORRECTED
  std::size_t kept = store.plan(ctg::feed<X>(x, 2), ctg::feed<T>(t, 2));  // the mistake: no loss reads T
#else
  std::size_t kept = store.plan(ctg::feed<X>(x, 2));
#endif
  (void)kept;
}

// Compile-fail pair: ctg::unfused(step), the reference with one loop per node,
// run on the fused step's store: it ran the fused step, so a "fused equals
// unfused" check compared the fused step with itself. The corrected twin gives
// the reference its own store.
// expect-error: ctg: this step does not run on this store
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;

int main() {
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::tanh(ctg::matmul(X{}, W{})))), ctg::wrt<W>);
  auto reference = ctg::unfused(step);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::vector<float> x(2 * 8, 0.5f);
  const float fused = step(store, ctg::feed<X>(x, 2));
#ifndef CTG_CORRECTED
  const float plain = reference(store, ctg::feed<X>(x, 2));  // the mistake
#else
  auto plain_store = ctg::make_store(dev, reference);
  const float plain = reference(plain_store, ctg::feed<X>(x, 2));
#endif
  (void)fused;
  (void)plain;
}

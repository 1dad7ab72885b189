// Compile-fail pair: adding a bias whose length does not broadcast against the rows
// ([N,16] + [8]). The corrected twin gives the bias the row length.
// expect-error: ctg: shape mismatch
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"fc.w", ctg::f32, 8, 16>;
#ifndef CTG_CORRECTED
using B = ctg::param<"fc.b", ctg::f32, 8>;  // the mistake: sized by the input, not the output
#else
using B = ctg::param<"fc.b", ctg::f32, 16>;
#endif

int main() {
  auto y = ctg::matmul(X{}, W{}) + B{};
  auto loss = ctg::mean(ctg::square(y));
  auto step = ctg::value_and_grad(loss, ctg::wrt<W, B>);
  // The user's next lines add no errors of their own.
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::vector<float> x(2 * 8, 0.5f);
  float l = step(store, ctg::feed<X>(x, 2));
  auto g = store.grad<B>();
  (void)l;
  (void)g;
}

// Compile-fail pair: matmul whose inner dims do not agree ([N,64] @ [32,16]).
// The static dims are known, so this must be a compile error at the user's call.
// The corrected twin uses a [64,16] weight.
// expect-error: ctg: shape mismatch
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 64>;
#ifndef CTG_CORRECTED
using W = ctg::param<"proj.w", ctg::f32, 32, 16>;  // the mistake: declared [out, in]
#else
using W = ctg::param<"proj.w", ctg::f32, 64, 16>;
#endif

int main() {
  auto y = ctg::matmul(X{}, W{});
  auto loss = ctg::mean(ctg::square(y));
  auto step = ctg::value_and_grad(loss, ctg::wrt<W>);
  // The user's next lines add no errors of their own.
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::vector<float> x(2 * 64, 0.5f);
  float l = step(store, ctg::feed<X>(x, 2));
  auto g = store.grad<W>();
  (void)l;
  (void)g;
}

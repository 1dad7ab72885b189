// Compile-fail pair: value_and_grad(loss) (every trainable parameter) on a loss
// that reads a trainable parameter only through no_grad. The explicit
// wrt<Proj, Head> is "no gradient path"; the implicit form used to leave Proj
// out without a word, so it never trained (B5 in another dress). It is the
// same error, naming the fix. The corrected twin freezes the projection.
// expect-error: ctg: no gradient path: this trainable parameter .* reaches the loss only through no_grad
// expect-error: freeze it \(ctg::frozen\)
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
#ifndef CTG_CORRECTED
using Proj = ctg::param<"proj.w", ctg::f32, 16, 16>;  // the mistake: meant to stay fixed, but trainable
#else
using Proj = ctg::frozen<"proj.w", ctg::f32, 16, 16>;
#endif
using Head = ctg::param<"head.w", ctg::f32, 16, 4>;

int main() {
  auto features = ctg::no_grad(ctg::matmul(X{}, Proj{}));
  auto loss = ctg::mean(ctg::square(ctg::matmul(features, Head{})));
  auto step = ctg::value_and_grad(loss);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  auto g = store.grad<Head>();
  (void)g;
}

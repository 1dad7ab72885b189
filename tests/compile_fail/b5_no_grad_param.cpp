// Seed bug B5 (autocast's weight-cast cache): a no-grad forward and a grad forward in one
// autocast context shared the cached low-precision weight made without grad, and backward
// failed at run time.
//
// In ctg there is no cast cache: no_grad(...) is part of the type, so the no-grad bf16 copy
// of the weight is a different node from the grad one and can never stand in for it. If the
// training loss reaches the weight only through that no-grad copy, the weight has no
// gradient path and asking for its gradient does not compile.
// The corrected twin builds the training forward with the grad cast (the no-grad copy is
// still used, for the teacher/eval branch, in the same graph).
// expect-error: ctg: no gradient path
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::bf16, ctg::dyn, 32>;
using W = ctg::param<"proj.w", ctg::f32, 32, 32>;
using B = ctg::param<"proj.b", ctg::f32, 32>;

int main() {
  auto w_eval = ctg::no_grad(ctg::cast<ctg::bf16>(W{}));  // "cached" for the no-grad eval pass
  auto w_train = ctg::cast<ctg::bf16>(W{});
  static_assert(!std::is_same_v<decltype(w_eval), decltype(w_train)>);
  auto teacher = ctg::no_grad(ctg::cast<ctg::f32>(ctg::matmul(X{}, w_eval)));
#ifndef CTG_CORRECTED
  auto student = ctg::cast<ctg::f32>(ctg::matmul(X{}, w_eval)) + B{};  // the mistake: the cached no-grad copy
#else
  auto student = ctg::cast<ctg::f32>(ctg::matmul(X{}, w_train)) + B{};
#endif
  auto loss = ctg::mean(ctg::square(student - teacher));
  auto step = ctg::value_and_grad(loss, ctg::wrt<W, B>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

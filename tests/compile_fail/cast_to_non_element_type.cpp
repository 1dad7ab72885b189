// cast<T> takes one of ctg's element types: cast<int> must not compile, with
// one error (two "i32 index tensors do not enter arithmetic" followed, as
// the failed cast's dtype was int). The corrected twin casts to bf16.
// expect-error: ctg: cast target must be an element type
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
using W = ctg::param<"w", ctg::f32, 4, 3>;

int main() {
#ifndef CTG_CORRECTED
  auto y = ctg::cast<int>(ctg::matmul(X{}, W{}));  // the mistake
#else
  auto y = ctg::cast<ctg::bf16>(ctg::matmul(X{}, W{}));
#endif
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

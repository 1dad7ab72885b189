// Compile-fail pair: an i32 index tensor is ids, not numbers; cast<f64> of
// one would enter arithmetic (and went through f32: 16777217 became
// 16777216). The corrected twin reads the ids as gather does.
// expect-error: ctg: i32 index tensors do not enter arithmetic
// expect-error-count: 1
#include <ctg/ctg.hpp>

using Ids = ctg::input<"ids", ctg::i32, ctg::dyn>;
using E = ctg::param<"e", ctg::f64, 32, 4>;

int main() {
#ifndef CTG_CORRECTED
  auto y = ctg::sum(ctg::cast<ctg::f64>(Ids{}) * ctg::sum<0>(E{}));
#else
  auto y = ctg::sum(ctg::gather(E{}, Ids{}));
#endif
  auto step = ctg::value_and_grad(y);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

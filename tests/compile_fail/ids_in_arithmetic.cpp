// Compile-fail pair: ids (an i32 tensor) in arithmetic, exp(ids), is one
// error with its ctg: message, not a cascade from the dtype rules and the
// element functions after it. The corrected twin embeds the ids first.
// expect-error: ctg: i32 index tensors do not enter arithmetic
// expect-error-count: 1
#include <ctg/ctg.hpp>

using Ids = ctg::input<"ids", ctg::i32, ctg::dyn>;
using E = ctg::param<"e", ctg::f32, 32, 4>;

int main() {
#ifndef CTG_CORRECTED
  auto y = ctg::sum(ctg::exp(Ids{}) * ctg::sum(E{}));
#else
  auto y = ctg::sum(ctg::exp(ctg::gather(E{}, Ids{})));
#endif
  auto step = ctg::value_and_grad(y);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

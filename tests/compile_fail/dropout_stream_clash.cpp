// Compile-fail pair: two dropouts whose different names hash to one random
// stream (the stream is the name's 32-bit hash; this pair was found by
// search). They would drop the same elements, silently. The corrected twin
// renames one.
// expect-error: ctg: two dropouts' names hash to one random stream
// expect-note: A = [^ ]*"blk.qfqysx.drop"
// expect-note: B = [^ ]*"blk.tlauom.drop"
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;

int main() {
  auto h = ctg::dropout<"blk.qfqysx.drop">(ctg::matmul(X{}, W{}), ctg::lit<0.1>);
#ifndef CTG_CORRECTED
  auto y = ctg::dropout<"blk.tlauom.drop">(ctg::tanh(h), ctg::lit<0.1>);  // the mistake (by chance)
#else
  auto y = ctg::dropout<"blk.tlauom.drop2">(ctg::tanh(h), ctg::lit<0.1>);
#endif
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

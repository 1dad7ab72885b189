// Item 10 of issue 15: steps sharing one store are matched by leaf name and
// type at compile time. An evaluation step whose "w" is bf16 where the
// training step's is f32 must not compile (the note names both leaves). The
// corrected twin reads the training step's leaf.
// expect-error: ctg: two different leaves share one name
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;
#ifndef CTG_CORRECTED
using WEval = ctg::param<"w", ctg::bf16, 16, 16>;  // the mistake: another dtype
#else
using WEval = W;
#endif

int main() {
  auto train = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{}, W{}))));
  auto eval = ctg::forward(ctg::matmul(X{}, ctg::cast<ctg::f32>(WEval{})));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, train, eval);
  (void)store;
}

// Item 10 of issue 15: a store shares a training step's parameters with
// evaluation steps, which evaluate the trained model: an evaluation step with
// dropout (the "forgot model.eval()" bug) must not compile. The corrected twin
// builds the evaluation step without it.
// expect-error: ctg: a step sharing a training store runs without dropout
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;

template <bool Dropout>
auto logits() {
  auto h = ctg::tanh(ctg::matmul(X{}, W{}));
  if constexpr (Dropout) return ctg::dropout<"drop">(h, ctg::lit<0.1>);
  else return h;
}

int main() {
  auto train = ctg::value_and_grad(ctg::mean(ctg::square(logits<true>())));
#ifndef CTG_CORRECTED
  auto eval = ctg::forward(logits<true>());  // the mistake
#else
  auto eval = ctg::forward(logits<false>());
#endif
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, train, eval);
  (void)store;
}

// Compile-fail pair: differentiating a loss that no trainable parameter reaches.
// Every leaf of this model is an input or frozen, so there is nothing to differentiate:
// value_and_grad must reject it at compile time, at the user's call.
// The corrected twin makes the classifier head trainable.
// expect-error: ctg: loss does not require grad
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using Emb = ctg::frozen<"encoder.w", ctg::f32, 16, 16>;
#ifndef CTG_CORRECTED
using Head = ctg::frozen<"head.w", ctg::f32, 16, 4>;  // the mistake: the head is frozen too
#else
using Head = ctg::param<"head.w", ctg::f32, 16, 4>;
#endif

int main() {
  auto logits = ctg::matmul(ctg::relu(ctg::matmul(X{}, Emb{})), Head{});
  auto loss = ctg::mean(ctg::square(logits));
  auto step = ctg::value_and_grad(loss, ctg::wrt<Head>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

// Compile-fail pair: asking for the gradient of a parameter the loss does not use.
// The decoder weight is declared but the loss never reads it; requesting its gradient
// must not compile (it would be all zeros forever). The corrected twin asks only for
// the parameters the loss reaches.
// expect-error: ctg: no gradient path
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using Enc = ctg::param<"enc.w", ctg::f32, 8, 4>;
using Dec = ctg::param<"dec.w", ctg::f32, 4, 8>;

int main() {
  auto code = ctg::tanh(ctg::matmul(X{}, Enc{}));
  auto loss = ctg::mean(ctg::square(code));  // forgot to decode
#ifndef CTG_CORRECTED
  auto step = ctg::value_and_grad(loss, ctg::wrt<Enc, Dec>);
#else
  auto step = ctg::value_and_grad(loss, ctg::wrt<Enc>);
#endif
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

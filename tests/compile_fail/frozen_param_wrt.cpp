// Compile-fail pair: asking value_and_grad for the gradient of a frozen leaf.
// A frozen leaf never gets a gradient buffer; listing it in wrt<...> must not compile.
// The corrected twin lists only the trainable adapter.
// expect-error: ctg: frozen parameter
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using Base = ctg::frozen<"base.w", ctg::f32, 8, 8>;
using Adapter = ctg::param<"adapter.w", ctg::f32, 8, 8>;

int main() {
  auto y = ctg::matmul(X{}, Base{}) + ctg::matmul(X{}, Adapter{});
  auto loss = ctg::mean(ctg::square(y));
#ifndef CTG_CORRECTED
  auto step = ctg::value_and_grad(loss, ctg::wrt<Base, Adapter>);
#else
  auto step = ctg::value_and_grad(loss, ctg::wrt<Adapter>);
#endif
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

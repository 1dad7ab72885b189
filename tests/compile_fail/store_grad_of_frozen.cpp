// Compile-fail pair: reading the gradient of a frozen leaf from a store. The step
// compiles (the frozen embedding is read, never differentiated), but store.grad<E>()
// must not: a frozen leaf has no gradient buffer. The corrected twin reads the
// trainable head's gradient.
// expect-error: ctg: frozen parameter
// expect-error-count: 1
#include <span>

#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using E = ctg::frozen<"embed", ctg::f32, 16, 16>;
using H = ctg::param<"head.w", ctg::f32, 16, 4>;

int main() {
  auto loss = ctg::mean(ctg::square(ctg::matmul(ctg::matmul(X{}, E{}), H{})));
  auto step = ctg::value_and_grad(loss, ctg::wrt<H>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::span<float> e = store.param<E>();  // a frozen leaf's values are readable and writable
  (void)e;
#ifndef CTG_CORRECTED
  auto g = store.grad<E>();
#else
  auto g = store.grad<H>();
#endif
  (void)g;
}

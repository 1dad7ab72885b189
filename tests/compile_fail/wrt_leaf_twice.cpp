// Compile-fail pair: a leaf named twice in wrt<...>, here tied weights spelled
// as two aliases of one leaf type. It compiled, and AdamW kept two states for
// the one weight: two updates a step, its gradient counted twice in the norm.
// The corrected twin names the tied weight once.
// expect-error: ctg: a leaf is named twice in wrt<...>
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 2>;
using Embed = ctg::param<"wte", ctg::f32, 2, 2>;
using Head = Embed;  // tied: the head is the embedding

int main() {
  auto loss = ctg::sum(ctg::matmul(X{}, Head{}));
#ifndef CTG_CORRECTED
  auto step = ctg::value_and_grad(loss, ctg::wrt<Embed, Head>);
#else
  auto step = ctg::value_and_grad(loss, ctg::wrt<Embed>);
#endif
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::vector<float> x(4, 1.0f);
  ctg::optim::adamw opt(store, {.lr = 0.1f});
  float l = step(store, ctg::feed<X>(x, 2));
  opt.step(store);
  (void)l;
}

// Compile-fail pair: asking value_and_grad for the gradient of a frozen leaf.
// A frozen leaf never gets a gradient buffer; listing it in wrt<...> must not compile.
// The corrected twin lists only the trainable adapter. The program goes on as a
// user's would (store, init, step, gradient, optimizer, checkpoint): after the
// first error, none of those lines may add one.
// expect-error: ctg: frozen parameter
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>
#include <vector>

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
  ctg::nn::init_params(store, 1);
  std::vector<float> x(2 * 8, 0.5f), base(8 * 8, 0.1f);
  store.upload(Base{}, base);
  ctg::optim::adamw opt(store, {.lr = 1e-3f});
  float l = step(store, ctg::feed<X>(x, 2));
  auto g = store.grad<Adapter>();
  opt.step(store);
  ctg::optim::save("/dev/null", store, opt);
  (void)l;
  (void)g;
}

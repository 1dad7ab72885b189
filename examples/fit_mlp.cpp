// Fit a small MLP to y = sin(3 x0) * x1 on the CPU, with the gradient that
// ctg derives at compile time and a plain SGD update.
//   scripts/demo            (or build/default/examples/fit_mlp [steps])
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 2>;
using Y = ctg::input<"y", ctg::f32, ctg::dyn, 1>;
using W1 = ctg::param<"mlp.w1", ctg::f32, 2, 64>;
using B1 = ctg::param<"mlp.b1", ctg::f32, 64>;
using W2 = ctg::param<"mlp.w2", ctg::f32, 64, 1>;

// A layer is a template over its input expression; bf16 matmuls, f32 master weights.
template <class In>
auto mlp(In x) {
  auto h = ctg::tanh(ctg::matmul(ctg::cast<ctg::bf16>(x), ctg::cast<ctg::bf16>(W1{})) + ctg::cast<ctg::bf16>(B1{}));
  return ctg::cast<ctg::f32>(ctg::matmul(h, ctg::cast<ctg::bf16>(W2{})));
}

int main(int argc, char** argv) {
  long steps = 2000;
  if (argc > 1) {  // a whole number in [1, 10^7], nothing after it ("10x" is not 10)
    char* end = nullptr;
    steps = std::strtol(argv[1], &end, 10);
    if (end == argv[1] || *end != '\0' || steps < 1 || steps > 10000000) steps = 0;
  }
  if (argc > 2 || steps <= 0) {
    std::fprintf(stderr, "usage: fit_mlp [steps, 1 to 10000000]\n");
    return 2;
  }
  auto loss = ctg::mean(ctg::square(mlp(X{}) - Y{}));
  auto step = ctg::value_and_grad(loss, ctg::wrt<W1, B1, W2>);
  using step_t = decltype(step);
  static_assert(ctg::has_grad_path_v<decltype(loss), W1>);
  std::printf("graph: %zu nodes, %zu fused groups (%zu unfused), %zu trainable leaves\n",
              step_t::nodes::size, ctg::group_count_v<step_t>, ctg::group_count_v<decltype(ctg::unfused(step))>,
              ctg::params_t<decltype(loss)>::size);

  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::mt19937 rng(7);
  std::normal_distribution<float> init(0.0f, 0.5f);
  for (auto& w : store.param<W1>()) w = init(rng);
  for (auto& w : store.param<W2>()) w = init(rng) * 0.25f;

  constexpr int batch = 128;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(batch * 2), y(batch);
  const float lr = 0.1f;
  auto sgd = [&](auto params, auto grads) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= lr * grads[i];
  };
  for (int s = 1; s <= steps; ++s) {
    for (int b = 0; b < batch; ++b) {
      x[2 * b] = u(rng);
      x[2 * b + 1] = u(rng);
      y[b] = std::sin(3.0f * x[2 * b]) * x[2 * b + 1];
    }
    const float l = step(store, ctg::feed<X>(x, batch), ctg::feed<Y>(y, batch));
    sgd(store.param<W1>(), store.grad<W1>());
    sgd(store.param<B1>(), store.grad<B1>());
    sgd(store.param<W2>(), store.grad<W2>());
    if (s == 1 || s % (steps / 10 > 0 ? steps / 10 : 1) == 0) std::printf("step %5d  loss %.5f\n", s, l);
  }
  return 0;
}

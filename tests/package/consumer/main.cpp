// The package tests' consumer: includes the umbrella header and trains a little, built with
// strict warnings as errors (ctg's headers come in as system headers, as a user's -Werror
// build needs: tests/package/consumer/CMakeLists.txt).
#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

#include <cstdio>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::bf16, 8, 8>;

int main() {
  constexpr ctg::bf16 b(1.5f);
  static_assert(ctg::to_float(b) == 1.5f);
  const ctg::e4m3 q(1000.0f);  // saturates to 448
  const float back = ctg::to_float(q);
  std::printf("ctg consumer: e4m3(1000) = %g [0x%02X]\n", static_cast<double>(back),
              static_cast<unsigned>(q.bits));
  // A bf16 weight trained two steps (the CPU's GEMMs, AdamW): the loss falls.
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{}, ctg::cast<ctg::f32>(W{})) - X{})));
  ctg::cpu::device dev{1};
  auto store = ctg::make_store(dev, step);
  ctg::nn::init_params(store, 1);
  ctg::optim::adamw opt(store, {.lr = 0.01f});
  std::vector<float> x(32);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
  const float first = step(store, ctg::feed<X>(x, 4));
  opt.step(store);
  const float second = step(store, ctg::feed<X>(x, 4));
  std::printf("ctg consumer: loss %g, then %g\n", static_cast<double>(first), static_cast<double>(second));
  return back == 448.0f && second < first ? 0 : 1;
}

// A model written in a .cu file: nvcc compiles ctg's graph, autodiff and
// CPU store, and the step runs (on the CPU: no GPU needed, nothing skipped).
// Leaves are named by value (ctg::feed(X{}, ...), store.param(W{})), the
// form a .cu file needs: nvcc's host pass cannot spell a leaf's name inside a
// template argument list (README, "The CUDA backend"). The loss and the
// gradient are checked against plain loops.
#include <cmath>
#include <cstdio>
#include <vector>

#include <ctg/ctg.hpp>

namespace {
using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;
constexpr int batch = 5, in = 8, out = 4;
}  // namespace

int main() {
  auto loss = ctg::mean(ctg::square(ctg::tanh(ctg::matmul(X{}, W{}))));
  auto step = ctg::value_and_grad(loss);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  auto w = store.param(W{});
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(i % 11) - 0.25f;
  std::vector<float> x(batch * in);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 13) - 0.6f;
  const float l = step(store, ctg::feed(X{}, x, batch));
  const auto g = store.grad(W{});

  // Plain loops in double: z = x w, loss = mean(tanh(z)^2),
  // dloss/dw = x^T (2 tanh(z) (1 - tanh(z)^2) / (batch * out)).
  double want = 0.0;
  std::vector<double> dz(batch * out), want_g(in * out, 0.0);
  for (int b = 0; b < batch; ++b)
    for (int o = 0; o < out; ++o) {
      double z = 0.0;
      for (int i = 0; i < in; ++i) z += double(x[b * in + i]) * double(w[i * out + o]);
      const double t = std::tanh(z);
      want += t * t / (batch * out);
      dz[b * out + o] = 2.0 * t * (1.0 - t * t) / (batch * out);
    }
  for (int i = 0; i < in; ++i)
    for (int o = 0; o < out; ++o)
      for (int b = 0; b < batch; ++b) want_g[i * out + o] += double(x[b * in + i]) * dz[b * out + o];

  // f32 arithmetic over at most 8-term sums: relative 1e-5 of the largest value is ample.
  int bad = 0;
  if (std::abs(l - want) > 1e-5 * std::abs(want)) {
    std::printf("loss %.9g, want %.9g\n", static_cast<double>(l), want);
    ++bad;
  }
  double gmax = 0.0;
  for (double v : want_g) gmax = std::max(gmax, std::abs(v));
  for (int k = 0; k < in * out; ++k)
    if (std::abs(g[k] - want_g[k]) > 1e-5 * gmax) {
      if (bad++ < 5) std::printf("grad[%d] %.9g, want %.9g\n", k, static_cast<double>(g[k]), want_g[k]);
    }
  std::printf("loss %.6g (plain loops %.6g), %d of %d gradient entries off: %s\n", static_cast<double>(l), want,
              bad, in * out, bad ? "WRONG" : "ok");
  return bad ? 1 : 0;
}

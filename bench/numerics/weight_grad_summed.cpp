// The gradient of a weight that a batched product broadcasts (attention's
// w @ x^T over a batch), under bf16 autocast: time a step and the
// gradient's error against a float64 sum of the same bf16 terms. A program
// of its own (bench/numerics: not built by CMake, whose bench/*.cpp are
// Google Benchmark programs), for bench/RESULTS.md (stop 54):
//   c++ -std=gnu++20 -O2 -march=native -DNDEBUG -Iinclude bench/numerics/weight_grad_summed.cpp -o weight_grad_summed -lpthread
//   ./weight_grad_summed [batches = 8] [threads = 2]
#include <ctg/ctg.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <vector>

constexpr ctg::dim_t F = 768, D = 768, T = 1024;
using X = ctg::input<"x", ctg::bf16, ctg::dyn, T, D>;
using R = ctg::input<"r", ctg::bf16, ctg::dyn, F, T>;
using W = ctg::param<"w", ctg::f32, F, D>;

int main(int argc, char** argv) {
  const std::size_t B = argc > 1 ? std::atoi(argv[1]) : 8;
  const unsigned threads = argc > 2 ? std::atoi(argv[2]) : 2;
  // loss = sum((w @ x^T) * r): dW = sum_b r_b x_b exactly (the gradient of the product is r).
  auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(ctg::matmul(ctg::cast<ctg::bf16>(W{}), ctg::transpose(X{})) * R{})), ctg::wrt<W>);
  ctg::cpu::device dev{threads};
  auto st = ctg::make_store(dev, step);
  std::mt19937 rng(1);
  std::normal_distribution<float> u(0.0f, 1.0f);
  for (auto& w : st.param<W>()) w = 0.02f * u(rng);
  std::vector<ctg::bf16> x(B * T * D), r(B * F * T);
  for (auto& v : x) v = ctg::bf16(u(rng));
  for (auto& v : r) v = ctg::bf16(u(rng));
  auto run = [&] { step(st, ctg::feed<X>(std::span<const ctg::bf16>(x), B), ctg::feed<R>(std::span<const ctg::bf16>(r), B)); };
  run();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  // float64 reference of rows [0, 64) of dW.
  const auto g = st.grad<W>();
  double worst = 0, sum_rel = 0;
  std::size_t n = 0;
  for (ctg::dim_t i = 0; i < 64; ++i)
    for (ctg::dim_t j = 0; j < D; ++j) {
      double ref = 0, mag = 0;
      for (std::size_t b = 0; b < B; ++b)
        for (ctg::dim_t t = 0; t < T; ++t) {
          const double p = double(float(r[(b * F + i) * T + t])) * double(float(x[(b * T + t) * D + j]));
          ref += p;
          mag += std::abs(p);
        }
      const double e = std::abs(double(g[i * D + j]) - ref) / mag;
      worst = std::max(worst, e);
      sum_rel += e;
      ++n;
    }
  std::printf("B %zu threads %u: step %.1f ms (best of 5); dW error / sum|terms|: max %.3g mean %.3g\n", B, threads, best, worst, sum_rel / n);
}

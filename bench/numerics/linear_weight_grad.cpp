// A linear layer's weight gradient over a static batch, under bf16
// autocast: x @ w with x [B, T, 768], so w's gradient is x^T dy summed over
// the batches, which lie end to end along k (one product, stop 55). Times a
// step, best of 6. A program of its own (bench/numerics: not built by
// CMake), for bench/RESULTS.md:
//   c++ -std=gnu++20 -O2 -march=native -DNDEBUG -DBB=256 -DTT=32 -Iinclude bench/numerics/linear_weight_grad.cpp -o linear_weight_grad -lpthread
//   ./linear_weight_grad [threads = 2]
// (BB, TT: the batches and their rows; 8 and 1024 by default.)
#include <ctg/ctg.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#ifndef BB
#define BB 8
#endif
#ifndef TT
#define TT 1024
#endif
constexpr ctg::dim_t B = BB, T = TT, D = 768, F = 768;
using X = ctg::input<"x", ctg::bf16, B, T, D>;
using R = ctg::input<"r", ctg::bf16, B, T, F>;
using W = ctg::param<"w", ctg::f32, D, F>;
int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? std::atoi(argv[1]) : 2;
  auto step = ctg::value_and_grad(
      ctg::sum(ctg::cast<ctg::f32>(ctg::matmul(X{}, ctg::cast<ctg::bf16>(W{})) * R{})), ctg::wrt<W>);
  ctg::cpu::device dev{threads};
  auto st = ctg::make_store(dev, step);
  std::mt19937 rng(1);
  std::normal_distribution<float> u(0.0f, 1.0f);
  for (auto& w : st.param<W>()) w = 0.02f * u(rng);
  std::vector<ctg::bf16> x(B * T * D), r(B * T * F);
  for (auto& v : x) v = ctg::from_float<ctg::bf16>(u(rng));
  for (auto& v : r) v = ctg::from_float<ctg::bf16>(u(rng));
  double best = 1e9;
  for (int i = 0; i < 6; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step(st, ctg::feed<X>(x), ctg::feed<R>(r));
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  double s = 0;
  for (float g : st.grad<W>()) s += g;
  std::printf("best step %.1f ms (threads %u), grad sum %.6g\n", best, threads, s);
}

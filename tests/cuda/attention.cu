// Fused causal attention (graph/attention.hpp) on the GPU against the CPU
// store: the loss sum(attention(q, k, v) * r) and the gradients of q, k and
// v, in f64, f32, bf16 and f16, both layouts, sequences that do not fill the
// last block of rows (37, 19, 150, 100, 70, 136) and one that does (128), head
// dims 8, 16, 24, 32, 64 and 128, and f32 heads with scores near 4500;
// then two GPU stores give the same bits. bf16 and f16 heads of 16 to 128
// features run on tensor cores (exec/cuda/attention_mma.hpp: 150 tokens are
// three blocks of 64 and key tiles past the diagonal; heads of 128 take more
// than 48 KB of shared memory), the others on CUDA cores. Without a GPU:
// skipped (77).
//
// Tolerances, relative to each gradient's largest entry (the CPU and the GPU
// sum in other orders): f64 1e-11, f32 1e-5 (sums of at most 37 terms of
// ~1e-7 relative error each, through two such chains); bf16 2e-2 (the
// gradients are rounded to bf16, 2^-8 relative, and an input to a sum
// rounding to the other side of a bf16 step moves its result by as much; on
// tensor cores p and ds are rounded to bf16 before their products too: the
// CPU emulation of those kernels, tests/unit/cuda_mma_attention.cpp, is
// within 5e-3 of a double reference); f16 1e-2 (2^-11 relative steps).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/store.cuh>

#include "device_test.hpp"

namespace {
template <class T>
std::vector<float> download_grad(auto& store, auto leaf) {
  std::vector<T> g(decltype(leaf)::dims::static_numel);
  store.download_grad(leaf, std::span<T>(g));
  std::vector<float> out(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) out[i] = static_cast<float>(ctg::to_float(g[i]));
  return out;
}
template <class T>
std::vector<float> grad_of(auto& store, auto leaf) {
  auto g = store.grad(leaf);
  std::vector<float> out(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) out[i] = static_cast<float>(ctg::to_float(g[i]));
  return out;
}

bool close_to(const std::vector<float>& got, const std::vector<float>& want, double rel, const char* what) {
  double largest = 0, worst = 0;
  for (float w : want) largest = std::max(largest, std::abs(double(w)));
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
  const bool ok = largest > 0 && worst <= rel * largest;
  std::printf("  %-4s largest %.3e, worst error %.3e (%.2e of it; bound %.0e)%s\n", what, largest, worst,
              largest > 0 ? worst / largest : 0.0, rel, ok ? "" : "  FAILED");
  return ok;
}

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) return static_cast<T>(v);
  else return T(static_cast<float>(v));
}

// One case: leaves of Dims in T, the layout L; the loss and gradients on both devices.
// q and k are `offset` plus their values (large scores: see the last case).
template <class T, ctg::attention_layout L, ctg::dim_t... Dims>
bool check_case(const ctg::cuda::device& gpu, double rel, const char* name, double offset = 0) {
  using Q = ctg::param<"q", T, Dims...>;
  using K = ctg::param<"k", T, Dims...>;
  using V = ctg::param<"v", T, Dims...>;
  using R = ctg::frozen<"r", T, Dims...>;
  auto step = ctg::value_and_grad(ctg::sum(ctg::cast<float>(ctg::causal_attention<L>(Q{}, K{}, V{}) * R{})),
                                  ctg::wrt<Q, K, V>);
  auto cs = ctg::make_store(ctg::cpu::device{1}, step);
  auto gs = ctg::make_store(gpu, step);
  auto gs2 = ctg::make_store(gpu, step);
  constexpr std::size_t n = (std::size_t(Dims) * ...);
  std::vector<T> values(n);
  auto fill = [&](auto leaf, double scale, unsigned seed, double at = 0) {
    for (std::size_t i = 0; i < n; ++i) values[i] = from_double<T>(at + scale * std::sin(0.37 * double(i * seed + 1)));
    auto c = cs.param(leaf);
    std::copy(values.begin(), values.end(), c.begin());
    gs.upload(leaf, std::span<const T>(values));
    gs2.upload(leaf, std::span<const T>(values));
  };
  fill(Q{}, 2.0, 3, offset), fill(K{}, 2.0, 5, offset), fill(V{}, 1.0, 7), fill(R{}, 1.0, 11);
  const float lc = step(cs), lg = step(gs), lg2 = step(gs2);
  std::printf("%s: loss cpu %.8g, gpu %.8g\n", name, lc, lg);
  bool ok = std::abs(double(lc) - double(lg)) <= rel * std::max(1.0, std::abs(double(lc)));
  ok &= close_to(download_grad<T>(gs, Q{}), grad_of<T>(cs, Q{}), rel, "dq");
  ok &= close_to(download_grad<T>(gs, K{}), grad_of<T>(cs, K{}), rel, "dk");
  ok &= close_to(download_grad<T>(gs, V{}), grad_of<T>(cs, V{}), rel, "dv");
  const bool same = std::memcmp(&lg, &lg2, sizeof lg) == 0 && download_grad<T>(gs, Q{}) == download_grad<T>(gs2, Q{}) &&
                    download_grad<T>(gs, K{}) == download_grad<T>(gs2, K{}) &&
                    download_grad<T>(gs, V{}) == download_grad<T>(gs2, V{});
  std::printf("  two GPU stores: %s\n", same ? "the same bits" : "DIFFERENT bits  FAILED");
  return ok && same;
}
}  // namespace

int main() {
  return run_device_test([](const ctg::cuda::device& gpu) {
    using A = ctg::attention_layout;
    bool ok = check_case<double, A::token_rows, 1, 2, 19, 16>(gpu, 1e-11, "f64 token_rows [1,2,19,16]");
    ok &= check_case<float, A::token_rows, 2, 3, 37, 8>(gpu, 1e-5, "f32 token_rows [2,3,37,8]");
    ok &= check_case<float, A::feature_rows, 2, 2, 64, 37>(gpu, 1e-5, "f32 feature_rows [2,2,64,37]");
    ok &= check_case<ctg::bf16, A::feature_rows, 2, 3, 64, 37>(gpu, 2e-2, "bf16 feature_rows [2,3,64,37]");
    ok &= check_case<ctg::bf16, A::token_rows, 1, 2, 150, 32>(gpu, 2e-2, "bf16 token_rows [1,2,150,32]");
    ok &= check_case<ctg::f16, A::feature_rows, 2, 1, 16, 70>(gpu, 1e-2, "f16 feature_rows [2,1,16,70]");
    ok &= check_case<ctg::bf16, A::token_rows, 1, 2, 100, 128>(gpu, 2e-2, "bf16 token_rows [1,2,100,128]");
    ok &= check_case<ctg::bf16, A::token_rows, 1, 2, 37, 24>(gpu, 2e-2, "bf16 token_rows [1,2,37,24] (CUDA cores)");
    // Tokens a multiple of 8 along feature rows: staged 16 bytes at a time;
    // 128 tokens, two whole blocks of rows; f16 heads of 128.
    ok &= check_case<ctg::bf16, A::feature_rows, 1, 2, 64, 136>(gpu, 2e-2, "bf16 feature_rows [1,2,64,136]");
    ok &= check_case<ctg::f16, A::feature_rows, 1, 2, 128, 128>(gpu, 1e-2, "f16 feature_rows [1,2,128,128]");
    // Scores near 4500 (q and k near 40): lse rounded to f32 is off by up to
    // 2^-24 of that, which each row's output divides away on both devices
    // (without the division dq was 1.4e-2 off f64; with it the CPU is within
    // 2.3e-4 of f64, unit.attention: so the two within 1e-3 of each other).
    ok &= check_case<float, A::token_rows, 1, 2, 64, 8>(gpu, 1e-3, "f32 token_rows [1,2,64,8], scores near 4500", 40.0);
    return ok;
  });
}

// cpu::gemm vs the plain loop it replaces in run_matmul, on the tiny
// transformer's shapes (f32 and bf16 operands; bf16 rounds its result to bf16).
//   build/default/bench/bench_gemm_cpu
// Counter GFLOP: 2*M*N*K*batch per second (printed as GFLOP=x/s).
#include <benchmark/benchmark.h>

#include <ctg/core/dtypes.hpp>
#include <ctg/exec/cpu/gemm.hpp>
#include <random>
#include <vector>

namespace {

using ctg::dim_t;

// run_matmul's loop before cpu::gemm (one batch): a row of f32 accumulators, i-k-j.
template <class TA, class TB, class TC>
void naive_matmul(dim_t M, dim_t N, dim_t K, const TA* a, const TB* b, TC* c, std::vector<float>& acc) {
  for (dim_t i = 0; i < M; ++i) {
    for (dim_t j = 0; j < N; ++j) acc[j] = 0.0f;
    for (dim_t k = 0; k < K; ++k) {
      const float av = ctg::load_as<TA>(a[i * K + k]);
      const TB* brow = b + k * N;
      for (dim_t j = 0; j < N; ++j) acc[j] += av * ctg::load_as<TB>(brow[j]);
    }
    for (dim_t j = 0; j < N; ++j) c[i * N + j] = ctg::store_as<TC>(acc[j]);
  }
}

template <class T>
std::vector<T> random_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> v(n);
  for (auto& e : v) e = ctg::from_float<T>(u(rng));
  return v;
}

// Args: M, N, K, batch (independent matrices, as in batched attention).
template <class T, bool Packed>
void BM_gemm(benchmark::State& state) {
  const dim_t M = state.range(0), N = state.range(1), K = state.range(2), batch = state.range(3);
  const auto a = random_values<T>(static_cast<std::size_t>(batch * M * K), 1);
  const auto b = random_values<T>(static_cast<std::size_t>(batch * K * N), 2);
  std::vector<T> c(static_cast<std::size_t>(batch * M * N));
  std::vector<float> acc(static_cast<std::size_t>(N));
  ctg::cpu::gemm_workspace ws;
  for (auto _ : state) {
    for (dim_t i = 0; i < batch; ++i) {
      const T* ai = a.data() + i * M * K;
      const T* bi = b.data() + i * K * N;
      T* ci = c.data() + i * M * N;
      if constexpr (Packed) ctg::cpu::gemm(M, N, K, ai, bi, ci, ws);
      else naive_matmul(M, N, K, ai, bi, ci, acc);
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] =
      benchmark::Counter(2e-9 * static_cast<double>(M * N * K * batch), benchmark::Counter::kIsIterationInvariantRate);
}

// {M, N, K, batch}: projections (512 tokens, dim 64, SwiGLU 172, vocab 96), their
// weight gradients ([64,512]x[512,64] and alike), attention per (batch, head).
void shapes(benchmark::internal::Benchmark* b) {
  b->Args({512, 64, 64, 1})
      ->Args({512, 172, 64, 1})
      ->Args({512, 64, 172, 1})
      ->Args({512, 96, 64, 1})
      ->Args({512, 64, 96, 1})
      ->Args({64, 64, 512, 1})
      ->Args({64, 172, 512, 1})
      ->Args({64, 64, 16, 32})
      ->Args({64, 16, 64, 32})
      ->ArgNames({"M", "N", "K", "batch"})
      ->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_gemm<ctg::f32, false>)->Name("naive_f32")->Apply(shapes);
BENCHMARK(BM_gemm<ctg::f32, true>)->Name("gemm_f32")->Apply(shapes);
BENCHMARK(BM_gemm<ctg::bf16, false>)->Name("naive_bf16")->Apply(shapes);
BENCHMARK(BM_gemm<ctg::bf16, true>)->Name("gemm_bf16")->Apply(shapes);

}  // namespace
BENCHMARK_MAIN();

// cpu::gemm vs the plain loop it replaces in run_matmul, on the tiny
// transformer's shapes (f32 and bf16 operands; bf16 rounds its result to bf16),
// and vs OpenBLAS's cblas_sgemm (when CMake found it: Debian's libopenblas-dev,
// a benchmark peer only) at 1024^3 and the realistic transformer's shapes,
// one thread each (openblas_set_num_threads(1)). gemm_bf16 uses vdpbf16ps where
// the CPU has AVX512-BF16; gemm_bf16_widened is the f32 path it replaces.
// gemm_*_threads2: the same call on a 2-thread cpu::thread_pool. big/*_at:
// A read transposed (stored [K, M]: the weight gradients' x^T g), ctg's and
// cblas_sgemm's (CblasTrans). long_k/*: K past gemm_long_k. heads/*_bt: B
// read transposed (stored [N, K]: attention's heads, 64 rows against a
// head's 1024 x 1024 values), which gemm computes transposed.
//   build/default/bench/bench_gemm_cpu --benchmark_filter=1024
// Counter GFLOP: 2*M*N*K*batch per second (printed as GFLOP=x/s).
#include <benchmark/benchmark.h>

#include <ctg/core/dtypes.hpp>
#include <ctg/exec/cpu/gemm.hpp>
#include <random>
#include <type_traits>
#include <vector>

#if CTG_BENCH_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

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

enum class impl { naive, gemm, gemm_widened, gemm_threads2, openblas, gemm_at, openblas_at, gemm_bt, gemm_widened_bt, openblas_bt };

// Args: M, N, K, batch (independent matrices, as in batched attention).
template <class T, impl I>
void BM_gemm(benchmark::State& state) {
  const dim_t M = state.range(0), N = state.range(1), K = state.range(2), batch = state.range(3);
  const auto a = random_values<T>(static_cast<std::size_t>(batch * M * K), 1);
  const auto b = random_values<T>(static_cast<std::size_t>(batch * K * N), 2);
  std::vector<T> c(static_cast<std::size_t>(batch * M * N));
  std::vector<float> acc(static_cast<std::size_t>(N));
  ctg::cpu::gemm_workspace ws;
  ctg::cpu::thread_pool pool(2);
#if CTG_BENCH_HAVE_OPENBLAS
  openblas_set_num_threads(1);
#endif
  for (auto _ : state) {
    for (dim_t i = 0; i < batch; ++i) {
      const T* ai = a.data() + i * M * K;
      const T* bi = b.data() + i * K * N;
      T* ci = c.data() + i * M * N;
      if constexpr (I == impl::gemm) ctg::cpu::gemm(M, N, K, ai, bi, ci, ws);
      else if constexpr (I == impl::gemm_widened)
        ctg::detail::gemm_with(ctg::detail::gemm_isa::avx512, M, N, K, ai, bi, ci, ws);
      else if constexpr (I == impl::gemm_threads2) ctg::cpu::gemm(M, N, K, ai, bi, ci, ws, &pool);
      else if constexpr (I == impl::gemm_at) ctg::cpu::gemm(M, N, K, ai, bi, ci, ws, nullptr, {.transpose_a = true});
      else if constexpr (I == impl::gemm_bt) ctg::cpu::gemm(M, N, K, ai, bi, ci, ws, nullptr, {.transpose_b = true});
      else if constexpr (I == impl::gemm_widened_bt)
        ctg::detail::gemm_with(ctg::detail::gemm_isa::avx512, M, N, K, ai, bi, ci, ws, nullptr, {.transpose_b = true});
      else if constexpr (I == impl::naive) naive_matmul(M, N, K, ai, bi, ci, acc);
#if CTG_BENCH_HAVE_OPENBLAS
      else if constexpr (I == impl::openblas && std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
                    static_cast<int>(K), 1.0f, ai, static_cast<int>(K), bi, static_cast<int>(N), 0.0f, ci,
                    static_cast<int>(N));
      else if constexpr (I == impl::openblas_at && std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
                    static_cast<int>(K), 1.0f, ai, static_cast<int>(M), bi, static_cast<int>(N), 0.0f, ci,
                    static_cast<int>(N));
      else if constexpr (I == impl::openblas_bt && std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N),
                    static_cast<int>(K), 1.0f, ai, static_cast<int>(K), bi, static_cast<int>(K), 0.0f, ci,
                    static_cast<int>(N));
#endif
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

// 1024^3, and the realistic transformer's products (bench/realistic_lm_step.cpp:
// 1024 tokens, width 256, SwiGLU 688; per-head projections and attention over
// 64 (batch, head) pairs of 128 x 32).
void big_shapes(benchmark::internal::Benchmark* b) {
  b->Args({1024, 1024, 1024, 1})
      ->Args({1024, 688, 256, 1})
      ->Args({1024, 256, 688, 1})
      ->Args({256, 688, 1024, 1})
      ->Args({128, 32, 256, 64})
      ->Args({128, 128, 32, 64})
      ->ArgNames({"M", "N", "K", "batch"})
      ->Unit(benchmark::kMillisecond);
}

// The realistic transformer's weight gradients, x^T g over its 1024 tokens
// (A = x stored [K, M]).
void weight_grad_shapes(benchmark::internal::Benchmark* b) {
  b->Args({256, 688, 1024, 1})
      ->Args({688, 256, 1024, 1})
      ->Args({256, 256, 1024, 1})
      ->ArgNames({"M", "N", "K", "batch"})
      ->Unit(benchmark::kMillisecond);
}

// Long K, where gemm cuts k in blocks (gemm_long_k): GPT-2's LM-head
// backward over one sequence (1024 tokens, width 768, vocab 50304: the
// logits' gradient times the head), and a 768 x 768 weight gradient over 8
// sequences of 1024 tokens.
void long_k_shapes(benchmark::internal::Benchmark* b) {
  b->Args({1024, 768, 50304, 1})
      ->Args({768, 768, 8192, 1})
      ->ArgNames({"M", "N", "K", "batch"})
      ->Unit(benchmark::kMillisecond);
}

// Attention's heads, a head's 64 rows of q^T (or dv^T) against its 1024 x
// 1024 values (B = k stored [N, K]; heads/gemm_bf16: B stored [K, N]).
void head_shapes(benchmark::internal::Benchmark* b) {
  b->Args({64, 1024, 1024, 1})->ArgNames({"M", "N", "K", "batch"})->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_gemm<ctg::f32, impl::naive>)->Name("naive_f32")->Apply(shapes);
BENCHMARK(BM_gemm<ctg::f32, impl::gemm>)->Name("gemm_f32")->Apply(shapes);
BENCHMARK(BM_gemm<ctg::bf16, impl::naive>)->Name("naive_bf16")->Apply(shapes);
BENCHMARK(BM_gemm<ctg::bf16, impl::gemm>)->Name("gemm_bf16")->Apply(shapes);

BENCHMARK(BM_gemm<ctg::f32, impl::gemm>)->Name("big/gemm_f32")->Apply(big_shapes);
#if CTG_BENCH_HAVE_OPENBLAS
BENCHMARK(BM_gemm<ctg::f32, impl::openblas>)->Name("big/openblas_sgemm")->Apply(big_shapes);
#endif
BENCHMARK(BM_gemm<ctg::bf16, impl::gemm>)->Name("big/gemm_bf16")->Apply(big_shapes);
BENCHMARK(BM_gemm<ctg::bf16, impl::gemm_widened>)->Name("big/gemm_bf16_widened")->Apply(big_shapes);
BENCHMARK(BM_gemm<ctg::f32, impl::gemm_threads2>)->Name("big/gemm_f32_threads2")->Apply(big_shapes);
BENCHMARK(BM_gemm<ctg::bf16, impl::gemm_threads2>)->Name("big/gemm_bf16_threads2")->Apply(big_shapes);
BENCHMARK(BM_gemm<ctg::f32, impl::gemm_at>)->Name("big/gemm_f32_at")->Apply(weight_grad_shapes);
#if CTG_BENCH_HAVE_OPENBLAS
BENCHMARK(BM_gemm<ctg::f32, impl::openblas_at>)->Name("big/openblas_sgemm_at")->Apply(weight_grad_shapes);
#endif
BENCHMARK(BM_gemm<ctg::bf16, impl::gemm_at>)->Name("big/gemm_bf16_at")->Apply(weight_grad_shapes);

BENCHMARK(BM_gemm<ctg::f32, impl::gemm>)->Name("long_k/gemm_f32")->Apply(long_k_shapes);
#if CTG_BENCH_HAVE_OPENBLAS
BENCHMARK(BM_gemm<ctg::f32, impl::openblas>)->Name("long_k/openblas_sgemm")->Apply(long_k_shapes);
#endif
BENCHMARK(BM_gemm<ctg::bf16, impl::gemm>)->Name("long_k/gemm_bf16")->Apply(long_k_shapes);
BENCHMARK(BM_gemm<ctg::bf16, impl::gemm_threads2>)->Name("long_k/gemm_bf16_threads2")->Apply(long_k_shapes);

BENCHMARK(BM_gemm<ctg::f32, impl::gemm_bt>)->Name("heads/gemm_f32_bt")->Apply(head_shapes);
#if CTG_BENCH_HAVE_OPENBLAS
BENCHMARK(BM_gemm<ctg::f32, impl::openblas_bt>)->Name("heads/openblas_sgemm_bt")->Apply(head_shapes);
#endif
BENCHMARK(BM_gemm<ctg::bf16, impl::gemm_bt>)->Name("heads/gemm_bf16_bt")->Apply(head_shapes);
BENCHMARK(BM_gemm<ctg::bf16, impl::gemm>)->Name("heads/gemm_bf16")->Apply(head_shapes);
BENCHMARK(BM_gemm<ctg::bf16, impl::gemm_widened_bt>)->Name("heads/gemm_bf16_widened_bt")->Apply(head_shapes);

}  // namespace
BENCHMARK_MAIN();

// Bulk element-type conversion throughput on the CPU: f32 -> bf16 / f16 /
// e4m3 / e5m2 and back, and f32 -> fp8 with the tensor's amax computed in the
// same pass (what a "current scaling" quantizer does). Arrays of 2^22
// elements; bytes/s counts bytes read plus bytes written.
//   build/default/bench/bench_conversions --benchmark_min_time=0.1

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <ctg/core/dtypes.hpp>

namespace {

constexpr std::size_t kN = std::size_t{1} << 22;

// Activation-like data: normal(0, 1) with a few outliers.
const std::vector<float>& input() {
  static const std::vector<float> v = [] {
    std::vector<float> x(kN);
    std::mt19937 gen(42);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& e : x) e = nd(gen);
    for (std::size_t i = 0; i < kN; i += 4099) x[i] *= 100.0f;
    return x;
  }();
  return v;
}

void set_bytes(benchmark::State& state, std::size_t bytes_per_element) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(kN) *
                          static_cast<std::int64_t>(bytes_per_element));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(kN));
}

// Baseline: f32 -> f32 copy through the same loop shape.
void BM_copy_f32(benchmark::State& state) {
  const auto& in = input();
  std::vector<float> out(kN);
  for (auto _ : state) {
    const float* __restrict src = in.data();
    float* __restrict dst = out.data();
    for (std::size_t i = 0; i < kN; ++i) dst[i] = src[i];
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * sizeof(float));
}
BENCHMARK(BM_copy_f32);

template <class T>
void BM_from_f32(benchmark::State& state) {
  const auto& in = input();
  std::vector<T> out(kN);
  for (auto _ : state) {
    const float* __restrict src = in.data();
    T* __restrict dst = out.data();
    for (std::size_t i = 0; i < kN; ++i) dst[i] = T(src[i]);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, sizeof(float) + sizeof(T));
}

template <class T>
void BM_to_f32(benchmark::State& state) {
  const auto& in = input();
  std::vector<T> narrow(kN);
  for (std::size_t i = 0; i < kN; ++i) narrow[i] = T(in[i]);
  std::vector<float> out(kN);
  for (auto _ : state) {
    const T* __restrict src = narrow.data();
    float* __restrict dst = out.data();
    for (std::size_t i = 0; i < kN; ++i) dst[i] = static_cast<float>(src[i]);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, sizeof(T) + sizeof(float));
}

// payload = x * scale, with this pass also producing amax = max |x| (the
// next scale's input). The scale is fixed here so each iteration does the
// same work. amax is taken as the max of |x|'s bit patterns: for non-negative
// floats their order is the integer order, a NaN compares above +inf and so
// propagates, and an integer max reduction vectorizes (a float one with NaN
// semantics does not).
template <class T>
void BM_f32_to_fp8_with_amax(benchmark::State& state) {
  const auto& in = input();
  std::vector<T> out(kN);
  const float scale = ctg::dtype_traits<T>::max / 400.0f;
  float amax_seen = 0.0f;
  for (auto _ : state) {
    const float* __restrict src = in.data();
    T* __restrict dst = out.data();
    std::uint32_t amax_bits = 0;
    for (std::size_t i = 0; i < kN; ++i) {
      const float x = src[i];
      const std::uint32_t a = ctg::detail::f32_bits(x) & 0x7FFFFFFFu;
      amax_bits = amax_bits < a ? a : amax_bits;
      dst[i] = T(x * scale);
    }
    amax_seen = ctg::detail::f32_from_bits(amax_bits);
    benchmark::DoNotOptimize(amax_seen);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["amax"] = amax_seen;
  set_bytes(state, sizeof(float) + sizeof(T));
}

BENCHMARK(BM_from_f32<ctg::bf16>)->Name("BM_f32_to_bf16");
BENCHMARK(BM_from_f32<ctg::f16>)->Name("BM_f32_to_f16");
BENCHMARK(BM_from_f32<ctg::e4m3>)->Name("BM_f32_to_e4m3");
BENCHMARK(BM_from_f32<ctg::e5m2>)->Name("BM_f32_to_e5m2");
BENCHMARK(BM_to_f32<ctg::bf16>)->Name("BM_bf16_to_f32");
BENCHMARK(BM_to_f32<ctg::f16>)->Name("BM_f16_to_f32");
BENCHMARK(BM_to_f32<ctg::e4m3>)->Name("BM_e4m3_to_f32");
BENCHMARK(BM_to_f32<ctg::e5m2>)->Name("BM_e5m2_to_f32");
BENCHMARK(BM_f32_to_fp8_with_amax<ctg::e4m3>)->Name("BM_f32_to_e4m3_with_amax");
BENCHMARK(BM_f32_to_fp8_with_amax<ctg::e5m2>)->Name("BM_f32_to_e5m2_with_amax");

}  // namespace

BENCHMARK_MAIN();

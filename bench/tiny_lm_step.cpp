// One training step of the tiny transformer on the CPU (bench/lm_step.hpp),
// batch 8 x 64: f32, autocast<bf16> and fp8<delayed<>> policies (FP8 is
// emulated on the CPU: no speedup expected), each layer recomputed in
// backward (the default) or kept (ckpt_none), on 1 and 2 threads.
// bench/vs_pytorch_cpu.py runs this and the same step in PyTorch side by side.
//   build/default/bench/bench_tiny_lm_step
#include "lm_step.hpp"

namespace {
// Keep in sync with bench/vs_pytorch_cpu.py (SIZES["tiny"]).
struct bench_config {
  static constexpr ctg::dim_t vocab = 96, max_seq = 64, dim = 64, heads = 4, head_dim = 16, hidden = 172;
  static constexpr std::size_t layers = 2;
};
template <class Policy, class Cfg = bench_config>
void BM_step(benchmark::State& state) {
  lm_bench::train_step<Policy, Cfg, 8, 64>(state);
}

void threads(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
}
using f32 = ctg::precision::full<ctg::f32>;
using bf16 = ctg::precision::autocast<ctg::bf16>;
BENCHMARK(BM_step<f32>)->Name("tiny_lm_step/f32")->Apply(threads);
BENCHMARK(BM_step<bf16>)->Name("tiny_lm_step/bf16")->Apply(threads);
BENCHMARK(BM_step<bf16, lm_bench::kept<bench_config>>)->Name("tiny_lm_step/bf16/ckpt_none")->Apply(threads);
BENCHMARK(BM_step<ctg::precision::fp8<ctg::precision::delayed<>>>)->Name("tiny_lm_step/fp8")->Apply(threads);
}  // namespace

BENCHMARK_MAIN();

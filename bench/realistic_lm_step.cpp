// One training step of a realistic-size transformer on the CPU (bench/lm_step.hpp):
// width 256, 4 layers, 8 heads of 32, SwiGLU 688, vocab 256, batch 8 x 128
// tokens. f32 and autocast<bf16>, each layer recomputed in backward
// (checkpointing::every_layer, the default) or kept (ckpt_none), and bf16
// keeping all but attention's scores (ckpt_scores:
// checkpointing::attention_scores), and bf16 with fused attention
// (attention_kernel::fused, recomputed and kept), on 1 and 2 threads, a
// fixed 5 iterations after the warm-up.
// bench/vs_pytorch_cpu.py --size realistic runs this and the same step in PyTorch.
//   build/default/bench/bench_realistic_lm_step [--benchmark_filter=/threads:1]
#include "lm_step.hpp"

namespace {
// Keep in sync with bench/vs_pytorch_cpu.py (SIZES["realistic"]).
struct realistic_config {
  static constexpr ctg::dim_t vocab = 256, max_seq = 128, dim = 256, heads = 8, head_dim = 32, hidden = 688;
  static constexpr std::size_t layers = 4;
};
using kept = lm_bench::kept<realistic_config>;
using scores_recomputed = lm_bench::scores_recomputed<realistic_config>;
using fused = lm_bench::fused_attention<realistic_config>;
using fused_kept = lm_bench::fused_attention<kept>;
template <class Policy, class Cfg>
void BM_step(benchmark::State& state) {
  lm_bench::train_step<Policy, Cfg, 8, 128>(state);
}

void threads(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);
}
using f32 = ctg::precision::full<ctg::f32>;
using bf16 = ctg::precision::autocast<ctg::bf16>;
BENCHMARK(BM_step<f32, realistic_config>)->Name("realistic_lm_step/f32")->Apply(threads);
BENCHMARK(BM_step<f32, kept>)->Name("realistic_lm_step/f32/ckpt_none")->Apply(threads);
BENCHMARK(BM_step<bf16, realistic_config>)->Name("realistic_lm_step/bf16")->Apply(threads);
BENCHMARK(BM_step<bf16, kept>)->Name("realistic_lm_step/bf16/ckpt_none")->Apply(threads);
BENCHMARK(BM_step<bf16, scores_recomputed>)->Name("realistic_lm_step/bf16/ckpt_scores")->Apply(threads);
BENCHMARK(BM_step<bf16, fused>)->Name("realistic_lm_step/bf16/fused_attention")->Apply(threads);
BENCHMARK(BM_step<bf16, fused_kept>)->Name("realistic_lm_step/bf16/ckpt_none/fused_attention")->Apply(threads);
}  // namespace

BENCHMARK_MAIN();

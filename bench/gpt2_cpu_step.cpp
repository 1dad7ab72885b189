// One training step of GPT-2 small's shape on the CPU (bench/lm_step.hpp):
// vocab 50304, 12 layers of width 768, 12 heads of 64, SwiGLU 2048, one
// sequence of 1024 tokens, bf16 autocast, every layer's values kept, on the
// machine's two threads, a fixed 3 iterations after the warm-up; attention
// composed (the default) and fused (attention_kernel::fused). Its products
// are the long ones: the LM head's backward (K = 50304) and every weight
// gradient summed over a batch of one.
//   build/default/bench/bench_gpt2_cpu_step
#include "lm_step.hpp"

namespace {
struct gpt2_config {
  static constexpr ctg::dim_t vocab = 50304, max_seq = 1024, dim = 768, heads = 12, head_dim = 64, hidden = 2048;
  static constexpr std::size_t layers = 12;
};
using bf16 = ctg::precision::autocast<ctg::bf16>;
template <class Cfg>
void BM_step(benchmark::State& state) {
  lm_bench::train_step<bf16, Cfg, 1, 1024>(state);
}
BENCHMARK(BM_step<lm_bench::kept<gpt2_config>>)
    ->Name("gpt2_cpu_step/bf16/ckpt_none")
    ->ArgName("threads")
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
BENCHMARK(BM_step<lm_bench::fused_attention<lm_bench::kept<gpt2_config>>>)
    ->Name("gpt2_cpu_step/bf16/ckpt_none/fused_attention")
    ->ArgName("threads")
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
}  // namespace

BENCHMARK_MAIN();

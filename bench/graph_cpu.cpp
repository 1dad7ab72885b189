// CPU backend: fused vs materialized-per-op vs Eigen, and softmax fwd+bwd.
// The argument of the ctg runs is the thread count (cpu::device{threads});
// Eigen's expressions run on one thread.
//   build/default/bench/bench_graph_cpu
#include <benchmark/benchmark.h>

#include <ctg/ctg.hpp>
#include <random>
#include <vector>

#if CTG_BENCH_HAVE_EIGEN
#include <Eigen/Core>
#endif

namespace {
constexpr ctg::dim_t chain_n = 1 << 24;
using X = ctg::input<"x", ctg::f32, ctg::dyn>;

// The 6-op chain: exp(tanh(x * 0.5 + 1)) * sigmoid(x).
auto chain() {
  X x;
  return ctg::exp(ctg::tanh(x * ctg::lit<0.5> + ctg::lit<1.0>)) * ctg::sigmoid(x);
}

std::vector<float> random_floats(std::size_t n, float lo, float hi) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = u(rng);
  return v;
}

template <class Step>
void run_chain(benchmark::State& state, Step step) {
  const auto xs = random_floats(chain_n, -3.0f, 3.0f);
  auto store = ctg::make_store(ctg::cpu::device{static_cast<unsigned>(state.range(0))}, step);
  for (auto _ : state) {
    step(store, ctg::feed<X>(xs, chain_n));
    benchmark::DoNotOptimize(store.value().data());
  }
  state.SetItemsProcessed(state.iterations() * chain_n);
  state.SetBytesProcessed(state.iterations() * chain_n * 8);  // read x, write out
}

void BM_chain_fused(benchmark::State& state) { run_chain(state, ctg::forward(chain())); }
void BM_chain_materialized(benchmark::State& state) { run_chain(state, ctg::unfused(ctg::forward(chain()))); }
void threads(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_chain_fused)->Apply(threads);
BENCHMARK(BM_chain_materialized)->Apply(threads);

#if CTG_BENCH_HAVE_EIGEN
void BM_chain_eigen(benchmark::State& state) {
  const auto xs = random_floats(chain_n, -3.0f, 3.0f);
  Eigen::Map<const Eigen::ArrayXf> x(xs.data(), chain_n);
  Eigen::ArrayXf out(chain_n);
  for (auto _ : state) {
    out = (x * 0.5f + 1.0f).tanh().exp() * (1.0f / (1.0f + (-x).exp()));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * chain_n);
  state.SetBytesProcessed(state.iterations() * chain_n * 8);
}
BENCHMARK(BM_chain_eigen)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// Row-wise softmax forward + backward on a 4096 x 4096 matrix: loss = sum(softmax(W) * R).
using SW = ctg::param<"w", ctg::f32, 4096, 4096>;
using SR = ctg::frozen<"r", ctg::f32, 4096, 4096>;
void BM_softmax_fwd_bwd_4096(benchmark::State& state) {
  auto step = ctg::value_and_grad(ctg::sum(ctg::softmax(SW{}) * SR{}), ctg::wrt<SW>);
  auto store = ctg::make_store(ctg::cpu::device{static_cast<unsigned>(state.range(0))}, step);
  const auto w = random_floats(4096 * 4096, -4.0f, 4.0f), r = random_floats(4096 * 4096, -1.0f, 1.0f);
  std::copy(w.begin(), w.end(), store.param<SW>().begin());
  std::copy(r.begin(), r.end(), store.param<SR>().begin());
  for (auto _ : state) benchmark::DoNotOptimize(step(store));
  state.counters["groups"] = static_cast<double>(ctg::group_count_v<decltype(step)>);
  state.SetItemsProcessed(state.iterations() * 4096 * 4096);
}
BENCHMARK(BM_softmax_fwd_bwd_4096)->Apply(threads);

void BM_softmax_fwd_4096(benchmark::State& state) {
  auto step = ctg::forward(ctg::softmax(SW{}));
  auto store = ctg::make_store(ctg::cpu::device{static_cast<unsigned>(state.range(0))}, step);
  const auto w = random_floats(4096 * 4096, -4.0f, 4.0f);
  std::copy(w.begin(), w.end(), store.param<SW>().begin());
  for (auto _ : state) benchmark::DoNotOptimize(step(store));
  state.SetItemsProcessed(state.iterations() * 4096 * 4096);
}
BENCHMARK(BM_softmax_fwd_4096)->Apply(threads);
}  // namespace

BENCHMARK_MAIN();

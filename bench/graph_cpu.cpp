// CPU backend: fused vs materialized-per-op vs Eigen (and what Eigen's
// element functions give up in accuracy), softmax fwd+bwd (also causal),
// and the loss head's cross-entropy fwd+bwd.
// The argument of the ctg runs is the thread count (cpu::device{threads});
// Eigen's expressions run on one thread.
//   build/default/bench/bench_graph_cpu
#include <benchmark/benchmark.h>

#include <ctg/ctg.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
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

// What Eigen's speed buys: the max error (ulps of the exact double result)
// of Eigen's and ctg's exp and tanh over every 97th float of a range, as
// counters (one iteration; the time is the sweep's, not a figure).
// [from, to]: floats of one sign, |from| <= |to|, every 97th by their bits.
std::vector<float> every_97th(float from, float to) {
  std::uint32_t b0, b1;
  std::memcpy(&b0, &from, 4);
  std::memcpy(&b1, &to, 4);
  std::vector<float> xs;
  for (std::uint64_t b = b0; b <= b1; b += 97) {
    const auto bits = static_cast<std::uint32_t>(b);
    float x;
    std::memcpy(&x, &bits, 4);
    xs.push_back(x);
  }
  return xs;
}
template <class F>
double max_ulp(std::vector<float> xs, F f, double (*exact)(double)) {
  const Eigen::ArrayXf got = f(Eigen::Map<const Eigen::ArrayXf>(xs.data(), static_cast<Eigen::Index>(xs.size())));
  double worst = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double want = exact(static_cast<double>(xs[i]));
    int e = 0;
    std::frexp(want, &e);
    const double ulp = want == 0 ? 0x1p-149 : std::ldexp(1.0, std::max(e - 24, -149));
    worst = std::max(worst, std::fabs(static_cast<double>(got[static_cast<Eigen::Index>(i)]) - want) / ulp);
  }
  return worst;
}
void BM_element_function_accuracy(benchmark::State& state) {
  auto ctg_exp = [](const auto& x) { return x.unaryExpr([](float v) { return ctg::math::exp(v); }).eval(); };
  auto ctg_tanh = [](const auto& x) { return x.unaryExpr([](float v) { return ctg::math::tanh(v); }).eval(); };
  auto eigen_exp = [](const auto& x) { return x.exp().eval(); };
  auto eigen_tanh = [](const auto& x) { return x.tanh().eval(); };
  double (*exp_d)(double) = std::exp;
  double (*tanh_d)(double) = std::tanh;
  for (auto _ : state) {
    // exp where it is normal (its result from -87.3 on) and below; tanh on one side (it is odd).
    for (auto [name, xs] : {std::pair{"", every_97th(0.0f, 88.0f)}, std::pair{"", every_97th(-0.0f, -87.0f)},
                            std::pair{"_below_-87", every_97th(-87.0f, -103.0f)}}) {
      const std::string below = name;
      state.counters["eigen_exp_ulp" + below] =
          std::max(state.counters["eigen_exp_ulp" + below].value, max_ulp(xs, eigen_exp, exp_d));
      state.counters["ctg_exp_ulp" + below] =
          std::max(state.counters["ctg_exp_ulp" + below].value, max_ulp(xs, ctg_exp, exp_d));
    }
    const auto ts = every_97th(0.0f, 10.0f);
    state.counters["eigen_tanh_ulp"] = max_ulp(ts, eigen_tanh, tanh_d);
    state.counters["ctg_tanh_ulp"] = max_ulp(ts, ctg_tanh, tanh_d);
  }
}
BENCHMARK(BM_element_function_accuracy)->Iterations(1)->Unit(benchmark::kMillisecond);
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

// Attention's causal softmax, forward + backward, over 64 heads' [128, 128]
// scores (the ones above the diagonal masked to -inf, so exp meets -inf
// there): loss = sum(softmax(causal_mask(S)) * R).
constexpr ctg::dim_t cs_heads = 64, cs_seq = 128;
using CS = ctg::param<"s", ctg::f32, cs_heads, cs_seq, cs_seq>;
using CR = ctg::frozen<"r", ctg::f32, cs_heads, cs_seq, cs_seq>;
void BM_causal_softmax_fwd_bwd(benchmark::State& state) {
  auto step = ctg::value_and_grad(ctg::sum(ctg::softmax(ctg::causal_mask(CS{})) * CR{}), ctg::wrt<CS>);
  auto store = ctg::make_store(ctg::cpu::device{static_cast<unsigned>(state.range(0))}, step);
  constexpr std::size_t n = cs_heads * cs_seq * cs_seq;
  const auto w = random_floats(n, -4.0f, 4.0f), r = random_floats(n, -1.0f, 1.0f);
  std::copy(w.begin(), w.end(), store.param<CS>().begin());
  std::copy(r.begin(), r.end(), store.param<CR>().begin());
  for (auto _ : state) benchmark::DoNotOptimize(step(store));
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_causal_softmax_fwd_bwd)->Apply(threads);

// The loss head's cross-entropy, forward + backward, over 1024 tokens of
// GPT-2's vocabulary (50304), with f32 and with bf16 logits (the loss in
// f32 either way, as autocast runs it): loss = cross_entropy(logits,
// targets), gradient to the logits.
constexpr ctg::dim_t ce_tokens = 1024, ce_vocab = 50304;
template <class T>
void BM_cross_entropy_fwd_bwd(benchmark::State& state) {
  using Logits = ctg::param<"logits", T, ce_tokens, ce_vocab>;
  using Targets = ctg::input<"targets", ctg::i32, ctg::dyn>;
  auto step = ctg::value_and_grad(ctg::nn::cross_entropy(Logits{}, Targets{}), ctg::wrt<Logits>);
  auto store = ctg::make_store(ctg::cpu::device{static_cast<unsigned>(state.range(0))}, step);
  const auto w = random_floats(ce_tokens * ce_vocab, -4.0f, 4.0f);
  auto logits = store.template param<Logits>();
  for (std::size_t i = 0; i < w.size(); ++i) logits[i] = static_cast<T>(w[i]);
  std::vector<ctg::i32> targets(ce_tokens);
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<ctg::i32>((i * 7919) % ce_vocab);
  for (auto _ : state) benchmark::DoNotOptimize(step(store, ctg::feed<Targets>(targets, ce_tokens)));
  state.counters["groups"] = static_cast<double>(ctg::group_count_v<decltype(step)>);
  state.SetItemsProcessed(state.iterations() * ce_tokens * ce_vocab);
}
BENCHMARK_TEMPLATE(BM_cross_entropy_fwd_bwd, ctg::f32)->Apply(threads);
BENCHMARK_TEMPLATE(BM_cross_entropy_fwd_bwd, ctg::bf16)->Apply(threads);

// Causal attention forward + backward over one sequence of GPT-2's shape
// (12 heads of 64, T = 1024, bf16 operands, f32 statistics): fused
// (ctg::causal_attention) against composed (the scores' product in bf16,
// the softmax loop in f32, its bf16 cast times v, as nn::causal_self_attention
// by default). loss = sum(attention(q, k, v) * r), gradients to q, k, v.
constexpr ctg::dim_t at_heads = 12, at_seq = 1024, at_dim = 64;
using AQ = ctg::param<"q", ctg::bf16, at_heads, at_seq, at_dim>;
using AK = ctg::param<"k", ctg::bf16, at_heads, at_seq, at_dim>;
using AV = ctg::param<"v", ctg::bf16, at_heads, at_seq, at_dim>;
using AR = ctg::frozen<"r", ctg::bf16, at_heads, at_seq, at_dim>;
template <bool Fused>
void BM_causal_attention_fwd_bwd(benchmark::State& state) {
  auto out = [] {
    if constexpr (Fused) {
      return ctg::causal_attention(AQ{}, AK{}, AV{});
    } else {
      auto scores = ctg::cast<ctg::f32>(ctg::matmul(AQ{}, ctg::transpose(AK{}))) * ctg::lit<0.125>;
      return ctg::matmul(ctg::cast<ctg::bf16>(ctg::softmax(ctg::causal_mask(scores))), AV{});
    }
  }();
  auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(out * AR{})), ctg::wrt<AQ, AK, AV>);
  auto store = ctg::make_store(ctg::cpu::device{static_cast<unsigned>(state.range(0))}, step);
  constexpr std::size_t n = at_heads * at_seq * at_dim;
  const auto q = random_floats(n, -1.0f, 1.0f), k = random_floats(n, -1.0f, 1.0f), r = random_floats(n, -1.0f, 1.0f);
  auto set = [&](auto leaf, const std::vector<float>& v) {
    auto p = store.param(leaf);
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<ctg::bf16>(v[i]);
  };
  set(AQ{}, q), set(AK{}, k), set(AV{}, r), set(AR{}, r);
  for (auto _ : state) benchmark::DoNotOptimize(step(store));
  state.counters["kept_MiB"] = static_cast<double>(store.kept_bytes()) / (1 << 20);
}
BENCHMARK_TEMPLATE(BM_causal_attention_fwd_bwd, true)->Name("BM_causal_attention_fwd_bwd/fused")->Apply(threads);
BENCHMARK_TEMPLATE(BM_causal_attention_fwd_bwd, false)->Name("BM_causal_attention_fwd_bwd/composed")->Apply(threads);
}  // namespace

BENCHMARK_MAIN();

#pragma once
// tiny_lm: training and sampling for one model config and precision policy,
// instantiated once per policy by train_<policy>.cpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include <ctg/io/dot.hpp>

#include "common.hpp"

namespace tiny_lm {

// ------------------------------------------------------- graph summaries ----
template <class L>
constexpr std::size_t numel_of() {
  std::size_t n = 1;
  for (ctg::dim_t d : L::dims::dims) n *= static_cast<std::size_t>(d);
  return n;
}

template <class... Ls>
constexpr std::size_t total_numel(ctg::tl::list<Ls...>) {
  return (std::size_t(0) + ... + numel_of<Ls>());
}

// The stack node of a step (its blocks' graphs are compiled once for all layers).
template <class... Ns>
auto find_stack(ctg::tl::list<Ns...>)
    -> ctg::tl::at_t<0, ctg::tl::concat_t<std::conditional_t<Ns::kind == ctg::node_kind::stack, ctg::tl::list<Ns>,
                                                             ctg::tl::list<>>...>>;

// ---------------------------------------------------------- train, sample ----
// Cfg with every layer's values kept for backward (for the memory comparison).
// At namespace scope: a local class may not have static data members.
template <class Cfg>
struct keep_all_layers : Cfg {
  static constexpr ctg::nn::checkpointing checkpoint = ctg::nn::checkpointing::none;
};

// One run of a compiled step, kept out of line. Inlined into the training
// loop next to the optimizer's update, g++ 12 -O2/-O3 spends minutes and
// gigabytes in its loop induction-variable canonicalization ("tree canonical
// iv"): 170 s / 6.9 GB for one step type (ctg::nn::tiny_config), against
// 26 s / 0.8 GB out of line.
template <class Step, class Store, class... Feeds>
[[gnu::noinline]] float run_step(const Step& step, Store& store, const Feeds&... feeds) {
  return step(store, feeds...);
}

// Dev: ctg::cpu::device, or ctg::cuda::device (train_cuda.cu): the stores, the
// optimizer's state and every step on that device.
template <class Cfg, class Policy, class Dev>
int train_and_sample(const options& o, const corpus& c, const char* policy_text, const Dev& dev) {
  using M = ctg::nn::transformer<Cfg, Policy>;
  auto loss = M::loss(Ids{}, Pos{}, Targets{});
  auto step = ctg::value_and_grad(loss);  // every trainable leaf the loss reaches
  using Step = decltype(step);
  using Stack = decltype(find_stack(typename Step::nodes{}));
  using params = typename Step::wrt;
  // Sampling: the same model without dropout, over the training store's leaves.
  auto sample_step = ctg::forward(M::evaluation::logits(Ids{}, Pos{}));
  using SampleStep = decltype(sample_step);
  static_assert(std::is_same_v<ctg::dtype_t<decltype(loss)>, ctg::f32>);

  // Data -> ids.
  const vocabulary voc = make_vocabulary(c.text, static_cast<std::size_t>(Cfg::vocab));
  std::vector<i32> data(c.text.size());
  for (std::size_t i = 0; i < c.text.size(); ++i) data[i] = voc.id_of[static_cast<unsigned char>(c.text[i])];
  const auto B = static_cast<std::size_t>(o.batch), T = static_cast<std::size_t>(o.seq);
  if (data.size() < T + 2)
    throw usage_error("the text has " + std::to_string(data.size()) + " bytes; --seq " + std::to_string(T) +
                      " needs at least " + std::to_string(T + 2));
  // The prompt's ids, before training: a byte the text lacks has none.
  std::string prompt = o.prompt;
  if (prompt.empty()) prompt = o.data.empty() ? "template <" : c.text.substr(0, 16);
  std::vector<i32> context;
  for (unsigned char ch : prompt) {
    if (voc.id_of[ch] < 0)
      throw usage_error("--prompt: the byte '" + printable(std::string(1, static_cast<char>(ch))) +
                        "' does not occur in the text, so the model has no id for it");
    context.push_back(voc.id_of[ch]);
  }

  std::printf("data: %s, %zu bytes\n", c.source.c_str(), data.size());
  std::printf("vocabulary: %zu distinct byte ids of the model's %lld", voc.size(), static_cast<long long>(Cfg::vocab));
  if (voc.fallback >= 0) {
    std::printf("; fallback id %d (printed '?') for %zu non-ASCII bytes", voc.fallback, voc.non_ascii_bytes);
    if (voc.rare_bytes) std::printf(" and %zu bytes of the rarest ASCII values", voc.rare_bytes);
    std::printf(" (%.3g%% of the text)",
                100.0 * static_cast<double>(voc.non_ascii_bytes + voc.rare_bytes) / static_cast<double>(data.size()));
  } else {
    std::printf("; all ASCII, no fallback id needed");
  }
  std::printf("\nunigram entropy of the text: %.3f nats/char (the loss of the best context-free model); uniform over "
              "the vocabulary: %.3f\n",
              unigram_entropy(data, voc.size()), std::log(static_cast<double>(voc.size())));

  std::printf("model: ctg::nn::transformer, width %lld, %zu layers as one ctg::nn::stack, %lld heads x %lld, SwiGLU "
              "hidden %lld, vocab %lld, max_seq %lld; policy %s\n",
              static_cast<long long>(Cfg::dim), Cfg::layers, static_cast<long long>(Cfg::heads),
              static_cast<long long>(Cfg::head_dim), static_cast<long long>(Cfg::hidden),
              static_cast<long long>(Cfg::vocab), static_cast<long long>(Cfg::max_seq), policy_text);
  std::printf("compile-time graph of the training step (loss + gradients):\n");
  std::printf("  nodes                 %zu (+ the block, compiled once for all %zu layers: forward %zu, "
              "backward %zu nodes)\n",
              Step::nodes::size, Cfg::layers, Stack::forward_step::nodes::size, Stack::backward_step::nodes::size);
  std::printf("  fusion groups         %zu (matmul %zu, elementwise %zu, reduction %zu, gather/scatter %zu, "
              "stack %zu; the block: forward %zu, backward %zu)\n",
              ctg::group_count_v<Step>, ctg::count_groups<Step>(ctg::group_kind::matmul),
              ctg::count_groups<Step>(ctg::group_kind::elementwise),
              ctg::count_groups<Step>(ctg::group_kind::reduction),
              ctg::count_groups<Step>(ctg::group_kind::gather) + ctg::count_groups<Step>(ctg::group_kind::scatter_add),
              ctg::count_groups<Step>(ctg::group_kind::stack), ctg::group_count_v<typename Stack::forward_step>,
              ctg::group_count_v<typename Stack::backward_step>);
  std::printf("  trainable parameters  %zu in %zu leaves (stacked block leaves count once)\n", total_numel(params{}),
              params::size);
  std::printf("sampling graph (logits only): %zu nodes, %zu fusion groups\n", SampleStep::nodes::size,
              ctg::group_count_v<SampleStep>);
  std::printf("fusion groups of the training step, in the order they run (g<i>, part, kind and loop, nodes fused, the "
              "node written):\n%s",
              ctg::io::group_summary(step).c_str());
  if (!o.graph.empty()) {
    write_graph(o.graph, ctg::io::to_dot(step));
    std::printf("graph of the training step: %s\n", o.graph.c_str());
  }

  // Parameters, optimizer, schedule. One store for both steps: sampling reads
  // the parameters training writes (no copy).
  auto store = ctg::make_store(dev, step, sample_step);

  // Activation memory, from the stores' plans for this batch and seq (no step
  // runs): every layer recomputed in backward (this model), and, for
  // comparison, the same model keeping every layer's values.
  {
    auto kept_step =
        ctg::value_and_grad(ctg::nn::transformer<keep_all_layers<Cfg>, Policy>::loss(Ids{}, Pos{}, Targets{}));
    auto kept_store = ctg::make_store(dev, kept_step);
    const std::vector<i32> zeros(B * T, 0), pos0(T, 0);
    auto per_token = [&](auto& st) {
      const std::size_t bytes = st.plan(ctg::feed(Ids{}, zeros, B, T), ctg::feed(Pos{}, pos0, T),
                                        ctg::feed(Targets{}, zeros, B, T));
      return static_cast<double>(bytes) / static_cast<double>(B * T);
    };
    const double ckpt = per_token(store), all = per_token(kept_store);
    std::printf("  activations kept      %.0f bytes/token with checkpointing::every_layer (this model), %.0f without "
                "(checkpointing::none): %.1fx less, at batch %zu x seq %zu\n",
                ckpt, all, all / ckpt, B, T);
  }
  store.check_finite(true);
  ctg::nn::init_params(store, o.seed);
  ctg::optim::adamw opt(store, {.lr = o.lr, .weight_decay = 0.1f, .max_grad_norm = 1.0f});
  const ctg::optim::warmup_cosine sched{
      .peak_lr = o.lr, .min_lr = o.lr / 10.0f, .warmup_steps = o.steps / 10, .total_steps = o.steps};

  // Training: random contiguous windows, targets = the next character.
  rng r{o.seed ^ 0x6c6d2d6261746368ull};
  std::vector<i32> ids(B * T), targets(B * T), pos(T);
  for (std::size_t t = 0; t < T; ++t) pos[t] = static_cast<i32>(t);
  std::printf("training: %ld steps of %zu x %zu tokens, AdamW (lr %.2g peak, warmup %ld, cosine to %.2g; weight decay "
              "0.1, grad norm clip 1.0)\n",
              o.steps, B, T, static_cast<double>(o.lr), o.steps / 10, static_cast<double>(o.lr) / 10.0);
  std::printf("  (loss: mean over the steps since the previous line)\n");
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto last = start;
  double loss_sum = 0.0, first_loss = 0.0, last_loss = 0.0;
  long in_interval = 0;
  for (long s = 1; s <= o.steps; ++s) {
    for (std::size_t b = 0; b < B; ++b) {
      const std::size_t at = r.below(data.size() - T);
      std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(at), T, ids.begin() + static_cast<std::ptrdiff_t>(b * T));
      std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(at + 1), T,
                  targets.begin() + static_cast<std::ptrdiff_t>(b * T));
    }
    const float l = run_step(step, store, ctg::feed(Ids{}, ids, B, T), ctg::feed(Pos{}, pos, T), ctg::feed(Targets{}, targets, B, T));
    const float lr = sched(opt.steps());
    const float gnorm = opt.step(store, lr);
    loss_sum += l;
    ++in_interval;
    if (s == 1 || s % o.log_every == 0 || s == o.steps) {
      const auto now = clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double mean = loss_sum / static_cast<double>(in_interval);
      if (s == 1) first_loss = mean;
      last_loss = mean;
      std::printf("step %6ld  loss %.4f  grad-norm %6.3f  lr %.2e  %7.0f tok/s  elapsed %6.1f s\n", s, mean,
                  static_cast<double>(gnorm), static_cast<double>(lr),
                  static_cast<double>(in_interval) * static_cast<double>(B * T) / dt, elapsed);
      std::fflush(stdout);
      loss_sum = 0.0;
      in_interval = 0;
      last = now;
    }
  }
  const double train_s = std::chrono::duration<double>(clock::now() - start).count();
  std::printf("trained in %.1f s: loss %.3f -> %.3f nats/char (unigram entropy %.3f)\n", train_s, first_loss,
              last_loss, unigram_entropy(data, voc.size()));

  // Sampling: the logits graph, on the trained parameters.
  if (o.sample > 0) {
    std::string out;
    std::vector<double> p(voc.size());
    std::vector<ctg::dtype_t<decltype(M::evaluation::logits(Ids{}, Pos{}))>> logits;
    for (long k = 0; k < o.sample; ++k) {
      const std::size_t n = std::min(context.size(), T);  // positions the model was trained on
      // On a GPU, FP8 products take rows in multiples of 16 (cuBLASLt): the
      // window is padded at its end, which changes no earlier position (the
      // attention is causal; the sampling step records no FP8 state).
      const std::size_t rows = o.device == "cuda" ? std::min<std::size_t>((n + 15) / 16 * 16, max_seq) : n;
      std::vector<i32> window(context.end() - static_cast<std::ptrdiff_t>(n), context.end());
      window.resize(rows, 0);
      std::vector<i32> wpos(rows);
      for (std::size_t t = 0; t < rows; ++t) wpos[t] = static_cast<i32>(t);
      run_step(sample_step, store, ctg::feed(Ids{}, window, 1, rows), ctg::feed(Pos{}, wpos, rows));
      logits.resize(store.value_count(sample_step));  // [1, n, vocab], in the policy's matmul type
      store.download_value(sample_step, std::span(logits));
      const auto row = std::span(logits).subspan((n - 1) * static_cast<std::size_t>(Cfg::vocab));
      double mx = -std::numeric_limits<double>::infinity(), z = 0.0;
      for (std::size_t v = 0; v < voc.size(); ++v)  // only ids that occur in the text
        mx = std::max(mx, static_cast<double>(ctg::load_as(row[v])) / o.temperature);
      for (std::size_t v = 0; v < voc.size(); ++v)
        z += p[v] = std::exp(static_cast<double>(ctg::load_as(row[v])) / o.temperature - mx);
      double u = r.uniform() * z;
      std::size_t pick = 0;
      while (pick + 1 < voc.size() && (u -= p[pick]) > 0.0) ++pick;
      context.push_back(static_cast<i32>(pick));
      out += static_cast<char>(voc.byte_of[pick]);
    }
    std::printf("sample (temperature %.2f, %ld chars after the prompt):\n----\n%s%s\n----\n",
                static_cast<double>(o.temperature), o.sample, printable(prompt).c_str(), printable(out).c_str());
  }
  return 0;
}

// Runs the width chosen by --width, one of those compiled in.
template <class Policy, class Dev, ctg::dim_t... W>
int run_compiled_width(width_list<W...>, const options& o, const corpus& c, const char* policy_text, const Dev& dev) {
  int rc = 2;
  (void)((o.width == W ? (rc = train_and_sample<lm_config<W>, Policy>(o, c, policy_text, dev), true) : false) || ...);
  return rc;
}

template <class Policy, class Dev = ctg::cpu::device>
int run_policy(const options& o, const corpus& c, const char* policy_text, const Dev& dev = {}) {
  return run_compiled_width<Policy>(compiled_widths{}, o, c, policy_text, dev);
}

}  // namespace tiny_lm

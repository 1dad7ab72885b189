// tiny_lm: a character-level decoder-only transformer (ctg::nn::transformer),
// trained on the CPU on real text that needs no download: by default ctg's own
// headers (every file under include/ctg/, concatenated), or any file given with
// --data. It prints the compile-time graph's size, trains with AdamW and a
// warmup + cosine schedule, and samples text from the trained model.
//   scripts/demo                 (or build/default/examples/tiny_lm [flags]; --help lists them)
//
// Compile cost: every model step is one graph type, and the model's width is
// part of it. This file compiles one width (64) x two precision policies x
// (training step + sampling forward) = 4 step types, about a minute and 2 GB
// with g++ 12 -O3; each further width (-DTINY_LM_WIDTHS=32,64) adds about as
// much again. The transformer's blocks are one ctg::nn::stack, so a type's
// size does not grow with the number of layers.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

#ifndef CTG_SOURCE_DIR
#error "CTG_SOURCE_DIR (ctg's source tree, for the default data) is set by examples/CMakeLists.txt"
#endif

namespace {

using ctg::dyn;
using ctg::i32;

// ------------------------------------------------------------- the model ----
// ids [batch, seq], positions [seq], targets [batch, seq] (the next character).
using Ids = ctg::input<"ids", i32, dyn, dyn>;
using Pos = ctg::input<"pos", i32, dyn>;
using Targets = ctg::input<"targets", i32, dyn, dyn>;

// The model's shape is compile-time (see ctg::nn::tiny_config); batch and seq
// are run-time. Width W: 4 heads of W/4, SwiGLU hidden ~8/3 W (a multiple of 4).
template <ctg::dim_t W>
struct lm_config {
  static constexpr ctg::dim_t vocab = 128;  // byte classes; see make_vocabulary
  static constexpr ctg::dim_t max_seq = 128;
  static constexpr ctg::dim_t dim = W;
  static constexpr ctg::dim_t heads = 4;
  static constexpr ctg::dim_t head_dim = W / 4;
  static constexpr ctg::dim_t hidden = (8 * W / 3 + 3) / 4 * 4;
  static constexpr std::size_t layers = 2;
};
constexpr ctg::dim_t max_seq = lm_config<64>::max_seq;

// The widths compiled in: a comma-separated list, e.g. -DTINY_LM_WIDTHS=32,64
// (each a multiple of 4).
#ifndef TINY_LM_WIDTHS
#define TINY_LM_WIDTHS 64
#endif
template <ctg::dim_t... W>
struct width_list {
  static_assert(sizeof...(W) > 0 && ((W > 0 && W % 4 == 0) && ...), "TINY_LM_WIDTHS: positive multiples of 4");
  static constexpr long values[] = {W...};
};
using compiled_widths = width_list<TINY_LM_WIDTHS>;

std::string compiled_widths_text() {
  std::string t;
  for (long w : compiled_widths::values) t += (t.empty() ? "" : ", ") + std::to_string(w);
  return t;
}

// ----------------------------------------------------------------- flags ----
struct options {
  long steps = 400;
  long batch = 16;
  long seq = 64;
  long width = 64;
  std::string policy = "f32";
  std::uint64_t seed = 1;
  float lr = 3e-3f;
  std::string data;  // empty: ctg's headers
  long log_every = 25;
  std::string prompt;  // empty: see default_prompt
  float temperature = 0.8f;
  long sample = 200;
};

void print_usage() {
  std::printf(R"(usage: tiny_lm [flags]

Trains a character-level decoder-only transformer (ctg::nn::transformer: 2 layers,
4 heads, SwiGLU, RMSNorm) on the CPU, then samples text from it.

  --steps N         training steps (default 400)
  --batch N         sequences per step, 1..1024 (default 16)
  --seq N           characters per sequence, 2..%lld (default 64); the position table
                    has %lld rows (compile-time)
  --width N         model width (default 64). The width is compile-time; this build
                    has: %s. Any other is rejected; build with
                    -DTINY_LM_WIDTHS=32,64 to add more (each adds about a minute of compile)
  --policy P        f32   everything in f32 (ctg::precision::full<f32>; default)
                    bf16  f32 master parameters, bf16 matmuls, f32 norms/softmax/loss
                          (ctg::precision::autocast<bf16>)
                    fp8   as bf16, but every weight product in FP8: e4m3 activations and
                          weights, e5m2 gradients, delayed scaling (ctg::precision::fp8)
  --seed N          seed of the initial parameters, the batches and the sampling (default 1)
  --lr X            peak learning rate, in (0, 1] (default 0.003): linear warmup over the
                    first 10%% of the steps, then cosine decay to lr/10. AdamW with weight
                    decay 0.1, global gradient norm clipped to 1.0
  --data PATH       train on this file (default: every file under ctg's include/ctg/,
                    concatenated in path order)
  --log-every N     a progress line every N steps (default 25)
  --prompt TEXT     where sampling starts (default "template <" on the default data,
                    else the text's first 16 bytes)
  --temperature X   sampling temperature, in (0, 10] (default 0.8)
  --sample N        characters to sample, 0..10000 (default 200)
  --help            this text

A flag's value is the next argument or follows '=' (--steps=100).
Vocabulary: every byte that occurs in the text gets an id. The model has %lld ids
(compile-time); bytes >= 128 (non-ASCII) share one fallback id, printed as '?', as
would the rarest bytes of a text with more distinct bytes than ids.
A bad flag or value exits with code 2.
)",
              static_cast<long long>(max_seq), static_cast<long long>(max_seq), compiled_widths_text().c_str(),
              static_cast<long long>(lm_config<64>::vocab));
}

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

long parse_long(const std::string& flag, const std::string& v, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi)
    throw usage_error(flag + " takes an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "], found '" + v + "'");
  return x;
}
float parse_float(const std::string& flag, const std::string& v, float lo, float hi, bool lo_open) {
  char* end = nullptr;
  errno = 0;
  const float x = std::strtof(v.c_str(), &end);
  const bool above = lo_open ? x > lo : x >= lo;
  if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x) || !above || x > hi) {
    std::ostringstream s;
    s << flag << " takes a number in " << (lo_open ? "(" : "[") << lo << ", " << hi << "], found '" << v << "'";
    throw usage_error(s.str());
  }
  return x;
}

// Returns false for --help.
bool parse_flags(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") return false;
    if (flag.rfind("--", 0) != 0) throw usage_error("unexpected argument '" + flag + "' (flags start with --)");
    const std::size_t eq = flag.find('=');
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else {
      static const char* const known[] = {"--steps", "--batch",  "--seq",    "--width",       "--policy", "--seed",
                                          "--lr",    "--data",   "--log-every", "--prompt", "--temperature",
                                          "--sample"};
      if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return flag == k; }) ==
          std::end(known))
        throw usage_error("unknown flag '" + flag + "'");
      if (i + 1 >= argc) throw usage_error(flag + " needs a value");
      value = argv[++i];
    }
    if (flag == "--steps") o.steps = parse_long(flag, value, 1, 10'000'000);
    else if (flag == "--batch") o.batch = parse_long(flag, value, 1, 1024);
    else if (flag == "--seq") o.seq = parse_long(flag, value, 2, max_seq);
    else if (flag == "--width") {
      o.width = parse_long(flag, value, 1, 1 << 20);
      const auto& ws = compiled_widths::values;
      if (std::find(std::begin(ws), std::end(ws), o.width) == std::end(ws))
        throw usage_error("--width " + value + " is not compiled in: the model width is a compile-time constant, and "
                          "this build has " + compiled_widths_text() +
                          " (rebuild with e.g. -DTINY_LM_WIDTHS=32,64 to add widths)");
    } else if (flag == "--policy") {
      if (value != "f32" && value != "bf16" && value != "fp8")
        throw usage_error("--policy takes f32, bf16 or fp8, found '" + value + "'");
      o.policy = value;
    } else if (flag == "--seed") {
      char* end = nullptr;
      errno = 0;
      const unsigned long long s = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || value[0] == '-' || *end != '\0' || errno == ERANGE)
        throw usage_error("--seed takes a non-negative integer, found '" + value + "'");
      o.seed = s;
    } else if (flag == "--lr") o.lr = parse_float(flag, value, 0.0f, 1.0f, true);
    else if (flag == "--data") {
      if (value.empty()) throw usage_error("--data needs a path");
      o.data = value;
    } else if (flag == "--log-every") o.log_every = parse_long(flag, value, 1, 10'000'000);
    else if (flag == "--prompt") {
      if (value.empty()) throw usage_error("--prompt needs at least one character");
      o.prompt = value;
    } else if (flag == "--temperature") o.temperature = parse_float(flag, value, 0.0f, 10.0f, true);
    else if (flag == "--sample") o.sample = parse_long(flag, value, 0, 10'000);
    else throw usage_error("unknown flag '" + flag + "'");
  }
  return true;
}

// ------------------------------------------------------------------ data ----
struct corpus {
  std::string text;
  std::string source;  // for the summary
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw usage_error("cannot read '" + p.string() + "'");
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

corpus load_corpus(const options& o) {
  corpus c;
  if (!o.data.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(o.data, ec)) throw usage_error("--data '" + o.data + "' is not a readable file");
    c.text = read_file(o.data);
    c.source = o.data;
  } else {
    const std::filesystem::path root = std::filesystem::path(CTG_SOURCE_DIR) / "include" / "ctg";
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
      if (it->is_regular_file()) files.push_back(it->path());
    if (ec || files.empty())
      throw std::runtime_error("cannot read the default data under '" + root.string() + "' (use --data PATH)");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) c.text += read_file(f);
    c.source = std::to_string(files.size()) + " files under " + root.string();
  }
  return c;
}

// Byte -> id: every byte that occurs gets an id 0..V-1 (in byte order); a
// fallback id (the last one) takes bytes >= 128 and, should the text use more
// ASCII bytes than fit, the rarest of them.
struct vocabulary {
  std::array<i32, 256> id_of{};
  std::vector<unsigned char> byte_of;  // by id; the fallback prints as '?'
  i32 fallback = -1;
  std::size_t non_ascii_bytes = 0, rare_bytes = 0;  // occurrences in the text mapped to the fallback
  std::size_t size() const { return byte_of.size(); }
};

vocabulary make_vocabulary(const std::string& text, std::size_t capacity) {
  std::array<std::size_t, 256> count{};
  for (unsigned char b : text) ++count[b];
  std::vector<int> ascii;
  bool non_ascii = false;
  for (int b = 0; b < 256; ++b)
    if (count[b]) (b < 128 ? ascii.push_back(b) : void(non_ascii = true));
  const bool need_fallback = non_ascii || ascii.size() > capacity;
  const std::size_t slots = need_fallback ? capacity - 1 : capacity;
  if (ascii.size() > slots) {  // keep the most frequent
    std::stable_sort(ascii.begin(), ascii.end(), [&](int a, int b) { return count[a] > count[b]; });
    ascii.resize(slots);
    std::sort(ascii.begin(), ascii.end());
  }
  vocabulary v;
  for (int b : ascii) v.byte_of.push_back(static_cast<unsigned char>(b));
  if (need_fallback) {
    v.fallback = static_cast<i32>(v.byte_of.size());
    v.byte_of.push_back('?');
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = std::lower_bound(ascii.begin(), ascii.end(), b);
    const bool own = it != ascii.end() && *it == b;
    v.id_of[b] = own ? static_cast<i32>(it - ascii.begin()) : v.fallback;
    if (!own) (b >= 128 ? v.non_ascii_bytes : v.rare_bytes) += count[b];
  }
  return v;
}

// Entropy (nats) of the id distribution of the text: the loss of the best
// model that ignores context.
double unigram_entropy(const std::vector<i32>& ids, std::size_t vocab) {
  std::vector<std::size_t> count(vocab);
  for (i32 t : ids) ++count[static_cast<std::size_t>(t)];
  double h = 0.0;
  for (std::size_t c : count)
    if (c) {
      const double p = static_cast<double>(c) / static_cast<double>(ids.size());
      h -= p * std::log(p);
    }
  return h;
}

// A small seeded PRNG (splitmix64) for batches and sampling.
struct rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }  // n << 2^64: bias negligible
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
};

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

// Copy every parameter of the training store into the sampling store (the
// same leaf types: one model, two graphs).
template <class From, class To>
void copy_params(From& from, To& to) {
  [&]<class... Ls>(ctg::tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (!L::fed) {
        static_assert(ctg::tl::contains_v<L, typename From::step_type::nodes>,
                      "the sampling graph reads a parameter the training graph does not have");
        auto src = from.template param<L>();
        auto dst = to.template param<L>();
        std::copy(src.begin(), src.end(), dst.begin());
      }
    };
    (one(std::type_identity<Ls>{}), ...);
  }(ctg::leaves_t<typename To::step_type::nodes>{});
}

std::string printable(const std::string& s) {
  std::string r = s;
  for (char& c : r) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 127 || (u < 32 && c != '\n' && c != '\t')) c = '?';
  }
  return r;
}

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

template <class Cfg, class Policy>
int train_and_sample(const options& o, const corpus& c, const char* policy_text) {
  using M = ctg::nn::transformer<Cfg, Policy>;
  auto loss = M::loss(Ids{}, Pos{}, Targets{});
  auto step = ctg::value_and_grad(loss);  // every trainable leaf the loss reaches
  using Step = decltype(step);
  using Stack = decltype(find_stack(typename Step::nodes{}));
  using params = typename Step::wrt;
  auto sample_step = ctg::forward(M::logits(Ids{}, Pos{}));
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

  // Parameters, optimizer, schedule.
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);

  // Activation memory, from the stores' plans for this batch and seq (no step
  // runs): every layer recomputed in backward (this model), and, for
  // comparison, the same model keeping every layer's values.
  {
    auto kept_step =
        ctg::value_and_grad(ctg::nn::transformer<keep_all_layers<Cfg>, Policy>::loss(Ids{}, Pos{}, Targets{}));
    auto kept_store = ctg::make_store(dev, kept_step);
    const std::vector<i32> zeros(B * T, 0), pos0(T, 0);
    auto per_token = [&](auto& st) {
      const std::size_t bytes = st.plan(ctg::feed<Ids>(zeros, B, T), ctg::feed<Pos>(pos0, T),
                                        ctg::feed<Targets>(zeros, B, T));
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
    const float l = run_step(step, store, ctg::feed<Ids>(ids, B, T), ctg::feed<Pos>(pos, T), ctg::feed<Targets>(targets, B, T));
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

  // Sampling: the logits graph, with the trained parameters copied by leaf.
  if (o.sample > 0) {
    auto sampler = ctg::make_store(dev, sample_step);
    copy_params(store, sampler);
    std::string prompt = o.prompt;
    if (prompt.empty()) prompt = o.data.empty() ? "template <" : c.text.substr(0, 16);
    std::vector<i32> context;
    for (unsigned char ch : prompt) context.push_back(voc.id_of[ch]);
    std::string out;
    std::vector<double> p(voc.size());
    for (long k = 0; k < o.sample; ++k) {
      const std::size_t n = std::min(context.size(), T);  // positions the model was trained on
      const std::vector<i32> window(context.end() - static_cast<std::ptrdiff_t>(n), context.end());
      std::vector<i32> wpos(pos.begin(), pos.begin() + static_cast<std::ptrdiff_t>(n));
      run_step(sample_step, sampler, ctg::feed<Ids>(window, 1, n), ctg::feed<Pos>(wpos, n));
      const auto logits = sampler.value();  // [1, n, vocab], in the policy's matmul type
      const auto row = logits.subspan((n - 1) * static_cast<std::size_t>(Cfg::vocab));
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

template <ctg::dim_t W>
int run_width(const options& o, const corpus& c) {
  if (o.policy == "bf16")
    return train_and_sample<lm_config<W>, ctg::precision::autocast<ctg::bf16>>(
        o, c, "bf16 (autocast<bf16>: f32 master parameters, bf16 matmuls, f32 statistics)");
  if (o.policy == "fp8")
    return train_and_sample<lm_config<W>, ctg::precision::fp8<ctg::precision::delayed<>>>(
        o, c, "fp8 (fp8<delayed<>>: weight products in e4m3 / e5m2 with delayed scaling, bf16 elsewhere)");
  return train_and_sample<lm_config<W>, ctg::precision::full<ctg::f32>>(o, c, "f32 (full<f32>)");
}

template <ctg::dim_t... W>
int run_compiled_width(width_list<W...>, const options& o, const corpus& c) {
  int rc = 2;
  (void)((o.width == W ? (rc = run_width<W>(o, c), true) : false) || ...);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  try {
    if (!parse_flags(argc, argv, o)) {
      print_usage();
      return 0;
    }
    const corpus c = load_corpus(o);
    return run_compiled_width(compiled_widths{}, o, c);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "tiny_lm: %s\nrun 'tiny_lm --help' for the flags\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tiny_lm: %s\n", e.what());
    return 1;
  }
}

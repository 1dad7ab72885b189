#pragma once
// tiny_lm: what every translation unit of the demo shares (the model's inputs
// and shape, the flags, the text and its vocabulary). main.cpp parses flags
// and loads the text; train_<policy>.cpp each compile the training and
// sampling steps of one precision policy (train.hpp).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

namespace tiny_lm {

using ctg::dyn;
using ctg::i32;

// ------------------------------------------------------------- the model ----
// ids [batch, seq], positions [seq], targets [batch, seq] (the next character).
using Ids = ctg::input<"ids", i32, dyn, dyn>;
using Pos = ctg::input<"pos", i32, dyn>;
using Targets = ctg::input<"targets", i32, dyn, dyn>;

// The model's shape is compile-time (see ctg::nn::tiny_config); batch and seq
// are run-time. Width W: 4 heads of W/4, SwiGLU hidden ~8/3 W, a multiple of
// 16 (FP8 products on a GPU need every dim one: cuBLASLt).
template <ctg::dim_t W>
struct lm_config {
  static constexpr ctg::dim_t vocab = 128;  // byte classes; see make_vocabulary
  static constexpr ctg::dim_t max_seq = 128;
  static constexpr ctg::dim_t dim = W;
  static constexpr ctg::dim_t heads = 4;
  static constexpr ctg::dim_t head_dim = W / 4;
  static constexpr ctg::dim_t hidden = (8 * W / 3 + 15) / 16 * 16;
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
  static constexpr std::array<long, sizeof...(W)> values{W...};
};
using compiled_widths = width_list<TINY_LM_WIDTHS>;

inline std::string compiled_widths_text() {
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
  std::string graph;  // empty: no drawing
  std::string device = "cpu";  // or "cuda" (a build with nvcc)
};

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Writes a graph's DOT text to path (.dot), or renders it there with Graphviz's
// dot in the format its extension names (.svg, .png, .pdf): main.cpp.
void write_graph(const std::string& path, const std::string& dot_text);

// ------------------------------------------------------------------ data ----
struct corpus {
  std::string text;
  std::string source;  // for the summary
};

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

inline vocabulary make_vocabulary(const std::string& text, std::size_t capacity) {
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
inline double unigram_entropy(const std::vector<i32>& ids, std::size_t vocab) {
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

inline std::string printable(const std::string& s) {
  std::string r = s;
  for (char& c : r) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 127 || (u < 32 && c != '\n' && c != '\t')) c = '?';
  }
  return r;
}

// One function per precision policy, each in its own translation unit
// (train_f32.cpp, train_bf16.cpp, train_fp8.cpp): a policy's steps are
// graph types of their own, compiled in parallel (bench/RESULTS.md has each
// unit's cost). -DCTG_TINY_LM_FP8=OFF leaves train_fp8.cpp out.
int train_f32(const options& o, const corpus& c);
int train_bf16(const options& o, const corpus& c);
int train_fp8(const options& o, const corpus& c);
// --device cuda (train_cuda.cu, in a build with nvcc): every policy on GPU 0.
int train_cuda(const options& o, const corpus& c);

}  // namespace tiny_lm

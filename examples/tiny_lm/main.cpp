// tiny_lm: a character-level decoder-only transformer (ctg::nn::transformer),
// trained on the CPU on real text that needs no download: by default ctg's own
// headers (every file under include/ctg/, concatenated), or any file given with
// --data. It prints the compile-time graph (its size, and its fusion groups in
// the order they run; --graph draws it), trains with AdamW and a warmup +
// cosine schedule, and samples text from the trained model.
//   scripts/demo                 (or build/default/examples/tiny_lm [flags]; --help lists them)
//
// Compile cost: every model step is one graph type, and the model's width and
// precision policy are part of it. Each policy's steps (training step, the
// same model keeping every layer for the memory figure, sampling forward on
// the training store's parameters) compile in their own translation unit, train_<policy>.cpp, so a parallel
// build runs them side by side and no unit holds all the types at once
// (figures: bench/RESULTS.md). Each further width (-DTINY_LM_WIDTHS=32,64)
// adds about as much again. The transformer's blocks are one ctg::nn::stack,
// so a type's size does not grow with the number of layers.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/wait.h>  // WIFEXITED: how dot exited

#include "common.hpp"

#ifndef CTG_SOURCE_DIR
#error "CTG_SOURCE_DIR (ctg's source tree, for the default data) is set by examples/CMakeLists.txt"
#endif

namespace tiny_lm {
namespace {

// The fp8 policy's unit (train_fp8.cpp) is left out with -DCTG_TINY_LM_FP8=OFF.
#ifndef TINY_LM_FP8
#define TINY_LM_FP8 0
#endif
constexpr bool fp8_compiled = TINY_LM_FP8 != 0;
// --device cuda (train_cuda.cu) is built when nvcc is found.
#ifndef TINY_LM_CUDA
#define TINY_LM_CUDA 0
#endif
constexpr bool cuda_compiled = TINY_LM_CUDA != 0;

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
                          weights, e5m2 gradients, delayed scaling (ctg::precision::fp8).
                          %s
  --device D        cpu (default) or cuda: the same training on GPU 0 (ctg::cuda::device;
                    the store, the optimizer's state and every step on the GPU). %s
  --seed N          seed of the initial parameters, the batches and the sampling (default 1)
  --lr X            peak learning rate, in (0, 1] (default 0.003): linear warmup over the
                    first 10%% of the steps, then cosine decay to lr/10. AdamW with weight
                    decay 0.1, global gradient norm clipped to 1.0
  --data PATH       train on this file (default: every file under ctg's include/ctg/,
                    concatenated in path order)
  --log-every N     a progress line every N steps (default 25)
  --graph PATH      draw the training step's graph (ctg::io::to_dot) before training: PATH.dot
                    is the DOT text; another extension (.svg, .png, .pdf) is rendered by
                    Graphviz's dot (Debian package graphviz; scripts/demo installs it)
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
              fp8_compiled ? "(compiled in)"
                           : "Not in this build: configured with -DCTG_TINY_LM_FP8=OFF",
              cuda_compiled ? "(compiled in)" : "Not in this build: nvcc was not found",
              static_cast<long long>(lm_config<64>::vocab));
}

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
      if (flag == "--help" || flag == "-h") throw usage_error(flag + " takes no value");
    } else {
      static const char* const known[] = {"--steps", "--batch",  "--seq",    "--width",       "--policy", "--seed",
                                          "--lr",    "--data",   "--log-every", "--prompt", "--temperature",
                                          "--sample", "--graph", "--device"};
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
      if (value == "fp8" && !fp8_compiled)
        throw usage_error("--policy fp8 is not compiled into this build (configured with -DCTG_TINY_LM_FP8=OFF); "
                          "configure with -DCTG_TINY_LM_FP8=ON");
      o.policy = value;
    } else if (flag == "--device") {
      if (value != "cpu" && value != "cuda") throw usage_error("--device takes cpu or cuda, found '" + value + "'");
      if (value == "cuda" && !cuda_compiled)
        throw usage_error("--device cuda is not in this build: nvcc was not found when it was configured");
      o.device = value;
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
    else if (flag == "--graph") {
      const std::string ext = std::filesystem::path(value).extension().string();
      const auto alnum = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; };
      if (ext.size() < 2 || !std::all_of(ext.begin() + 1, ext.end(), alnum))
        throw usage_error("--graph takes a file name ending in .dot, .svg, .png or .pdf, found '" + value + "'");
      o.graph = value;
    } else throw usage_error("unknown flag '" + flag + "'");
  }
  return true;
}

// ------------------------------------------------------------------ data ----
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

}  // namespace

// The DOT text as it is (.dot), or rendered by Graphviz's dot in the format
// path's extension names, reading the text from a pipe.
void write_graph(const std::string& path, const std::string& dot_text) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".dot") {
    std::ofstream f(path, std::ios::binary);
    f << dot_text;
    if (!f) throw std::runtime_error("--graph: cannot write '" + path + "'");
    return;
  }
  std::string quoted = "'";  // path as one shell word: in single quotes, each ' as '\''
  for (char ch : path) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  quoted += "'";
  const std::string command = "dot -T" + ext.substr(1) + " -o " + quoted;
  // Without dot the shell exits at once: a write to its pipe then fails (EPIPE), not the demo (SIGPIPE).
  const auto previous = std::signal(SIGPIPE, SIG_IGN);
  FILE* pipe = popen(command.c_str(), "w");
  const bool sent = pipe && std::fwrite(dot_text.data(), 1, dot_text.size(), pipe) == dot_text.size();
  const int status = pipe ? pclose(pipe) : -1;
  std::signal(SIGPIPE, previous);
  if (sent && status == 0) return;
  const std::string dot_file = std::filesystem::path(path).replace_extension(".dot").string();
  // (the shell exits 127 when it finds no dot; dot itself exits 1 on a format it lacks or a path it cannot write)
  if (!pipe || (WIFEXITED(status) && WEXITSTATUS(status) == 127))
    throw std::runtime_error("--graph: '" + command + "' failed: is Graphviz installed (Debian package graphviz; "
                             "scripts/demo installs it)? --graph " + dot_file + " writes the DOT text");
  throw std::runtime_error("--graph: '" + command + "' failed (see dot's message above: a format '" + ext.substr(1) +
                           "' that dot does not render, or a path it cannot write); --graph " + dot_file +
                           " writes the DOT text");
}

}  // namespace tiny_lm

int main(int argc, char** argv) {
  using namespace tiny_lm;
  options o;
  try {
    if (!parse_flags(argc, argv, o)) {
      print_usage();
      return 0;
    }
    const corpus c = load_corpus(o);
#if TINY_LM_CUDA
    if (o.device == "cuda") return train_cuda(o, c);
#endif
    if (o.policy == "bf16") return train_bf16(o, c);
#if TINY_LM_FP8
    if (o.policy == "fp8") return train_fp8(o, c);
#endif
    return train_f32(o, c);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "tiny_lm: %s\nrun 'tiny_lm --help' for the flags\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tiny_lm: %s\n", e.what());
    return 1;
  }
}

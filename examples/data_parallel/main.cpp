// data_parallel: the tiny transformer trained on several MPI ranks.
//
//   mpirun -np 2 ./build/default/examples/data_parallel --steps 50
//   ./build/default/examples/data_parallel --emulate 2 --steps 50   # one process playing 2 ranks: the same bits
//   mpirun -np 2 ./build/default/examples/data_parallel --fsdp      # the layers' parameters in shards (FSDP2)
//
// Each rank trains on its own batches of text (ctg's own headers), sampled
// from (seed, step, rank); gradients are reduce-scattered in f32 in rank
// order, each rank updates its dim-0 shard of every parameter with AdamW
// (moments and f32 masters sharded), and the updated shards are gathered;
// with --fsdp, the stacked layers' parameters stay in shards and each layer
// is gathered as it runs (--fsdp-keep: kept from its forward to its backward).
// Rank 0 prints the global batch's loss, the step time and the bytes each
// rank sent per step. With --save FILE the run ends with a checkpoint in
// the single-process format (loadable at any number of ranks).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/dist/checkpoint.hpp>
#include <ctg/dist/mpi_comm.hpp>

namespace {
using ctg::dyn;
using ctg::i32;
using Ids = ctg::input<"ids", i32, dyn, dyn>;
using Pos = ctg::input<"pos", i32, dyn>;
using Targets = ctg::input<"targets", i32, dyn, dyn>;

struct config {
  static constexpr ctg::dim_t vocab = 128, max_seq = 64, dim = 64, heads = 4, head_dim = 16, hidden = 172;
  static constexpr std::size_t layers = 2;
};
using model = ctg::nn::transformer<config, ctg::precision::autocast<ctg::bf16>>;

struct options {
  long steps = 50, batch = 8, seq = 64, emulate = 0;
  int fsdp = 0;  // 1: dist::fsdp; 2: dist::fsdp, forward gathers kept
  std::uint64_t seed = 1;
  float lr = 3e-3f;
  std::string save;
};
// A flag's value as a number of T: all of it, or an error naming the flag.
template <class T>
T number(const std::string& flag, const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [at, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc{} || at != end || text.empty())
    throw ctg::error("data_parallel: " + flag + " takes a number, not '" + text + "'");
  return v;
}
options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ctg::error("data_parallel: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--steps") o.steps = number<long>(a, value());
    else if (a == "--batch") o.batch = number<long>(a, value());
    else if (a == "--seq") o.seq = number<long>(a, value());
    else if (a == "--emulate") o.emulate = number<long>(a, value());
    else if (a == "--seed") o.seed = number<std::uint64_t>(a, value());
    else if (a == "--lr") o.lr = number<float>(a, value());
    else if (a == "--save") o.save = value();
    else if (a == "--fsdp") o.fsdp = 1;
    else if (a == "--fsdp-keep") o.fsdp = 2;
    else throw ctg::error("data_parallel: unknown flag " + a +
                          " (flags: --steps N --batch B (per rank) --seq T --emulate W --seed S --lr X --save FILE "
                          "--fsdp --fsdp-keep)");
  }
  if (o.steps < 1 || o.batch < 1 || o.seq < 2 || o.seq > config::max_seq || o.emulate < 0)
    throw ctg::error("data_parallel: --steps >= 1, --batch >= 1, 2 <= --seq <= 64, --emulate >= 0");
  return o;
}

// ctg's headers as one text, each byte an id in [0, 128).
std::vector<i32> load_text() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(CTG_SOURCE_DIR "/include/ctg"))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<i32> ids;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    for (unsigned char c : s.str()) ids.push_back(static_cast<i32>(c & 127));
  }
  return ids;
}

// splitmix64 of (seed, step, rank, row): where a row of a rank's batch starts.
std::size_t row_start(std::uint64_t seed, long step, int rank, long row, std::size_t range) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(step) * 0xBF58476D1CE4E5B9ull +
                    static_cast<std::uint64_t>(rank) * 0x94D049BB133111EBull + static_cast<std::uint64_t>(row);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::size_t>((z ^ (z >> 31)) % range);
}

int train(ctg::dist::communicator& comm, const options& o) {
  const std::vector<i32> text = load_text();
  auto step = ctg::value_and_grad(model::loss(Ids{}, Pos{}, Targets{}));
  auto store = ctg::make_store(ctg::cpu::device{1}, step);
  ctg::nn::init_params(store, o.seed);
  ctg::dist::recording_comm rec(comm);
  using dp_t = ctg::dist::data_parallel<decltype(store)>;
  const ctg::dist::fsdp sharded{.reshard_after_forward = o.fsdp == 1};
  const ctg::dist::emulate ranks{static_cast<int>(o.emulate)};
  std::unique_ptr<dp_t> dp;
  if (o.emulate) dp = o.fsdp ? std::make_unique<dp_t>(store, ranks, sharded) : std::make_unique<dp_t>(store, ranks);
  else dp = o.fsdp ? std::make_unique<dp_t>(store, rec, sharded) : std::make_unique<dp_t>(store, rec);
  ctg::dist::sharded_adamw opt(*dp, {.lr = o.lr, .max_grad_norm = 1.0f});
  const int world = dp->world(), runs = dp->shards_held(), first = dp->first_shard();
  const bool printer = comm.rank() == 0;
  if (printer)
    std::printf("data_parallel: %d rank%s%s, batch %ld x %ld tokens per rank, %zu floats of optimizer state "
                "on this rank; parameters held: %zu bytes in the store, %zu of the layers' shards, %zu gathered "
                "for the layers that run%s\n",
                world, world > 1 ? "s" : "", o.emulate ? " (emulated in one process)" : "", o.batch, o.seq,
                opt.state_elements(), store.stored_bytes(), dp->resident_bytes(), dp->gathered_bytes(),
                o.fsdp == 1 ? " (fsdp)" : o.fsdp == 2 ? " (fsdp, kept after forward)" : "");

  std::vector<i32> pos(static_cast<std::size_t>(o.seq)), ids(static_cast<std::size_t>(o.batch * o.seq)),
      targets(ids.size());
  for (long t = 0; t < o.seq; ++t) pos[static_cast<std::size_t>(t)] = static_cast<i32>(t);
  std::vector<double> ms;
  std::size_t bytes_per_step = 0;
  for (long s = 0; s < o.steps; ++s) {
    rec.reset();
    const auto t0 = std::chrono::steady_clock::now();
    for (int v = 0; v < runs; ++v) {
      for (long b = 0; b < o.batch; ++b) {
        const std::size_t at = row_start(o.seed, s, first + v, b, text.size() - static_cast<std::size_t>(o.seq) - 1);
        for (long t = 0; t < o.seq; ++t) {
          ids[static_cast<std::size_t>(b * o.seq + t)] = text[at + static_cast<std::size_t>(t)];
          targets[static_cast<std::size_t>(b * o.seq + t)] = text[at + static_cast<std::size_t>(t) + 1];
        }
      }
      step(store, ctg::feed<Ids>(ids, o.batch, o.seq), ctg::feed<Pos>(pos, o.seq),
           ctg::feed<Targets>(targets, o.batch, o.seq));
    }
    opt.step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    bytes_per_step = rec.bytes_sent();
    if (printer && (s % 10 == 0 || s + 1 == o.steps))
      std::printf("step %4ld  loss %.4f  %.1f ms\n", s, static_cast<double>(dp->loss()), ms.back());
  }
  std::sort(ms.begin(), ms.end());
  if (printer && o.emulate)  // (one process: its ranks exchange nothing over a communicator)
    std::printf("median step %.1f ms (emulated ranks send nothing)\n", ms[ms.size() / 2]);
  else if (printer)
    std::printf("median step %.1f ms; each rank sent %zu bytes per step (gradients in f32 by all-to-all, parameters "
                "in their dtypes by all-gather%s)\n",
                ms[ms.size() / 2], bytes_per_step, o.fsdp ? ", the layers' as they run" : "");
  if (!o.save.empty()) {
    ctg::dist::save(o.save, *dp, opt);
    if (printer) std::printf("saved %s\n", o.save.c_str());
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  ctg::dist::mpi_comm comm{argc, argv};
  try {
    const options o = parse(argc, argv);
    if (o.emulate && comm.size() > 1) throw ctg::error("data_parallel: --emulate runs in one process, not under mpirun -np > 1");
    return train(comm, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), e.what());
    return 1;
  }
}

// Data parallelism on real MPI ranks (run under mpirun -np 2 and -np 3):
//   * the tiny transformer (bf16 parameters, and FP8 with delayed scaling;
//     dropout on) trained 5 AdamW steps on W ranks equals, bit for bit, one
//     process emulating W ranks (which every rank also runs): losses,
//     gradient shards, parameters, FP8 scales. Its embedding's 11 rows do
//     not divide by 2 or 3, nor do its stacked layers' 8 rows by 3 (each
//     layer is cut on its own dim 0);
//   * what moves: a recording communicator counts the all-to-all bytes of
//     the gradients, which leave the frozen leaf out, in f32;
//   * mistakes on one rank are a ctg::error on every rank, never a hang
//     (ctest's timeout would catch one), and the next good step works.
// Exit status: 0 when every check passed on this rank.
#include <bit>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <span>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/dist/checkpoint.hpp>
#include <ctg/dist/mpi_comm.hpp>
#include <ctg/optim/optim.hpp>

#include "../common/stored_values.hpp"
#include "../common/tiny_transformer.hpp"

namespace {
using ctg::dyn;
using ctg::i32;
namespace pr = ctg::precision;

int failures = 0;
int my_rank = 0;
void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", my_rank, what.c_str());
}
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const ctg::error& e) {
    return e.what();
  }
  return "<no ctg::error>";
}

using config = test_util::tiny_transformer_config<2>;
using test_util::Ids, test_util::Pos, test_util::Tg;
template <class Policy>
auto train_step() {
  return ctg::value_and_grad(ctg::nn::transformer<config, Policy>::loss(Ids{}, Pos{}, Tg{}));
}

// Rank r's batch of step s: 2 sequences of 5 tokens, a function of (s, r) only.
constexpr int batch = 2, T = 5;
struct tokens {
  std::vector<i32> ids, tg;
};
tokens batch_of(int s, int r) {
  tokens t{std::vector<i32>(batch * T), std::vector<i32>(batch * T)};
  for (int i = 0; i < batch * T; ++i) {
    t.ids[static_cast<std::size_t>(i)] = (7 * s + 5 * r + 3 * i) % 11;
    t.tg[static_cast<std::size_t>(i)] = (2 * s + 3 * r + i * i) % 11;
  }
  return t;
}
template <class Step, class Store>
void run(Step& step, Store& st, const tokens& t, int b = batch) {
  static const std::vector<i32> pos{0, 1, 2, 3, 4};
  const auto n = static_cast<std::size_t>(b * T);
  step(st, ctg::feed<Ids>(std::span(t.ids).first(n), b, T), ctg::feed<Pos>(pos, T),
       ctg::feed<Tg>(std::span(t.tg).first(n), b, T));
}

using test_util::all_values;

// k micro-batches per rank and step (dp.accumulate(k)): rank r's micro-batch
// m of step s is batch_of(k * s + m, r), of 2 sequences for even m and 1 for
// odd m (the ranks feed one shape a micro-batch; the micro-batches need
// not); emulating, run m * W + v is rank v's.
// With `fsdp`, both hold the stacks' parameters in shards (dist::fsdp).
template <class Policy>
void world_equals_emulation(ctg::dist::communicator& comm, const char* name, int k = 1,
                            std::optional<ctg::dist::fsdp> fsdp = std::nullopt) {
  const int W = comm.size(), r = comm.rank();
  auto step = train_step<Policy>();
  ctg::cpu::device dev{1};
  auto real = ctg::make_store(dev, step);
  auto solo = ctg::make_store(dev, step);
  for (auto* s : {&real, &solo}) {
    s->seed(2026);
    ctg::nn::init_params(*s, 4, 0.3);
  }
  using dp_t = ctg::dist::data_parallel<decltype(real)>;
  std::optional<dp_t> dp_storage, em_storage;
  if (fsdp) {
    dp_storage.emplace(real, comm, *fsdp);
    em_storage.emplace(solo, ctg::dist::emulate{W}, *fsdp);
  } else {
    dp_storage.emplace(real, comm);
    em_storage.emplace(solo, ctg::dist::emulate{W});
  }
  dp_t& dp = *dp_storage;
  dp_t& em = *em_storage;
  check(dp.holds_stacked_params() == fsdp.has_value(), std::string(name) + ": the stack's parameters held in shards");
  // Under sharded<fp8<...>>, the weights outside the stack (lm_head) travel as fp8 bytes.
  constexpr std::size_t first_fp8 = [] {
    std::size_t k = 0;
    while (k < dp_t::trainable::size && dp_t::fp8_quantizer[k] == ctg::dist::detail::none) ++k;
    return k;
  }();
  constexpr bool fp8_gathered = first_fp8 < dp_t::trainable::size;
  static_assert(fp8_gathered == ctg::precision::shards_weights_v<Policy>);
  const ctg::optim::adamw_config oc{.lr = 0.02f, .max_grad_norm = 1.0f};
  ctg::dist::sharded_adamw opt(dp, oc);
  ctg::dist::sharded_adamw eopt(em, oc);
  dp.accumulate(k);
  em.accumulate(k);
  std::vector<float> losses;
  for (int s = 0; s < 5; ++s) {
    for (int m = 0; m < k; ++m) run(step, real, batch_of(k * s + m, r), batch - m % 2);
    for (int m = 0; m < k; ++m)
      for (int v = 0; v < W; ++v) run(step, solo, batch_of(k * s + m, v), batch - m % 2);
    const std::string at = std::string(name) + " step " + std::to_string(s);
    check(std::bit_cast<std::uint32_t>(dp.loss()) == std::bit_cast<std::uint32_t>(em.loss()), at + ": loss");
    losses.push_back(dp.loss());
    const auto g = dp.grad_shard(0), e = em.grad_shard(r);
    check(std::memcmp(g.data(), e.data(), g.size_bytes()) == 0, at + ": this rank's gradient shard");
    const float n1 = opt.step(), n2 = eopt.step();
    check(n1 == n2, at + ": gradient norm");
    // Every other step the weights are read whole, so the steps between take
    // the fp8 payloads gathered by the update (a weight made whole is
    // quantized by the store itself, the same bits).
    if (s % 2 == 1 && fp8_gathered) check(dp.provided(dp_t::fp8_quantizer[first_fp8]) != nullptr, at + ": fp8 gather used");
    if (s % 2 == 0 && s != 4) continue;
    opt.gather_whole_parameters();  // (a weight gathered as fp8 is whole only in its own rows; fsdp: every stack's)
    eopt.gather_whole_parameters();
    check(all_values(real) == all_values(solo), at + ": parameters and FP8 state after the update");
  }
  check(losses.back() < losses.front(), std::string(name) + ": the loss falls");
  if (r == 0)
    std::printf("%s%s on %d ranks, %d micro-batch%s each: losses %.6f .. %.6f, bitwise equal to %d emulated ranks\n",
                name, fsdp ? (fsdp->reshard_after_forward ? " (fsdp)" : " (fsdp, kept after forward)") : "", W, k,
                k > 1 ? "es" : "", static_cast<double>(losses.front()), static_cast<double>(losses.back()), W);
}

// dist::fsdp on real ranks: what its layer gathers change in a step's
// all-gathers, by hand, against the default run (the tiny transformer, 2
// layers). A rank's part of one layer is its padded rows of each stacked
// leaf: the norms' scales [8] (1 element a row); wq, wk, wv and wo [8, 8]
// (2 heads of 4: 8 rows of 8); w1 and w3 [8, 12], w2 [12, 8]. In the
// parameters' dtype (bf16; f32 under the fp8 policy), except that under
// sharded<fp8<...>> every weight travels as fp8 bytes and its amax.
template <class Policy>
void fsdp_bytes(ctg::dist::communicator& comm, const char* name) {
  const int W = comm.size(), r = comm.rank();
  constexpr bool fp8 = ctg::precision::shards_weights_v<Policy>;
  constexpr std::size_t t = fp8 ? 4 : 2;
  using step_t = decltype(train_step<Policy>());
  static_assert(sizeof(typename ctg::tl::at_t<2, typename step_t::wrt>::dtype) == t);  // (layers.{i}.ln1.scale)
  auto ceil_div = [&](std::size_t rows) { return (rows + static_cast<std::size_t>(W) - 1) / static_cast<std::size_t>(W); };
  const std::size_t norms = 2 * ceil_div(8), weights = 4 * ceil_div(8) * 8 + 2 * ceil_div(8) * 12 + ceil_div(12) * 8;
  const std::size_t layer_whole = t * (norms + weights);  // what the default run's update gathers of a layer
  const std::size_t layer_gather = fp8 ? t * norms + weights + 7 * sizeof(float) : layer_whole;
  constexpr std::size_t layers = config::layers;
  struct tally {
    std::size_t calls = 0, bytes = 0;
    std::vector<unsigned char> values;
  };
  auto one_step = [&](std::optional<ctg::dist::fsdp> f) {
    auto step = train_step<Policy>();
    ctg::cpu::device dev{1};
    auto s = ctg::make_store(dev, step);
    s.seed(3);
    ctg::nn::init_params(s, 4, 0.3);
    ctg::dist::recording_comm rec(comm);
    using dp_t = ctg::dist::data_parallel<decltype(s)>;
    std::optional<dp_t> dp;
    if (f) dp.emplace(s, rec, *f);
    else dp.emplace(s, rec);
    ctg::dist::sharded_adamw opt(*dp, {.lr = 0.02f});
    for (int k = 0; k < 2; ++k) {  // (the second step: the fp8 states' scales are no longer 1)
      rec.reset();
      run(step, s, batch_of(k, r));
      opt.step();
    }
    const auto ag = rec.of(ctg::dist::collective::all_gather);
    tally out{ag.calls, ag.bytes_sent, {}};
    opt.gather_whole_parameters();
    out.values = all_values(s);
    return out;
  };
  const tally whole = one_step(std::nullopt), reshard = one_step(ctg::dist::fsdp{}),
              keep = one_step(ctg::dist::fsdp{.reshard_after_forward = false});
  const std::size_t report = sizeof(ctg::dist::detail::run_report), others = static_cast<std::size_t>(W - 1);
  const std::string what = std::string("fsdp ") + name;
  // Resharding: every layer gathered for its forward and again for its
  // backward, the stack left out of the update's gather, and one more
  // agreement (on the feeds, before the run's gathers).
  check(reshard.calls == whole.calls + 2 * layers + 1, what + ": gathers per step: " + std::to_string(reshard.calls));
  check(reshard.bytes + others * layers * layer_whole == whole.bytes + others * (2 * layers * layer_gather + report),
        what + ": all-gather bytes per step: " + std::to_string(reshard.bytes));
  // Keeping the forward's gathers: each layer once.
  check(keep.calls == whole.calls + layers + 1, what + " keep: gathers per step: " + std::to_string(keep.calls));
  check(keep.bytes + others * layers * layer_whole == whole.bytes + others * (layers * layer_gather + report),
        what + " keep: all-gather bytes: " + std::to_string(keep.bytes));
  check(reshard.values == whole.values && keep.values == whole.values, what + ": the same parameters after the steps");
  if (r == 0)
    std::printf("fsdp %s on %d ranks: all-gather bytes sent per rank per step %zu (default %zu, kept after forward "
                "%zu); a layer's gather %zu bytes per rank\n",
                name, W, reshard.bytes, whole.bytes, keep.bytes, layer_gather);
}

// A frozen leaf and rows that do not divide.
using X = ctg::input<"x", ctg::f32, dyn, 4>;
using Y = ctg::input<"y", ctg::f32, dyn, 3>;
using W1 = ctg::param<"w1", ctg::bf16, 4, 5>;
using W2 = ctg::param<"w2", ctg::f32, 5, 3>;
using F = ctg::frozen<"f", ctg::f32, 3, 3>;
auto mlp_loss() {
  auto h = ctg::tanh(ctg::matmul(X{}, ctg::cast<ctg::f32>(W1{})));
  return ctg::mean(ctg::square(ctg::matmul(ctg::matmul(h, W2{}), F{}) - Y{}));
}

void bytes_moved(ctg::dist::communicator& comm) {
  const int W = comm.size();
  auto step = ctg::value_and_grad(mlp_loss());
  ctg::cpu::device dev{1};
  auto s = ctg::make_store(dev, step);
  ctg::nn::init_params(s, 3, 0.5);
  ctg::dist::recording_comm rec(comm);
  ctg::dist::data_parallel dp(s, rec);
  ctg::dist::sharded_adamw opt(dp);
  std::vector<float> x(8, 0.25f), y(6, 0.5f);
  rec.reset();
  step(s, ctg::feed<X>(x, 2), ctg::feed<Y>(y, 2));
  opt.step();
  // By hand: each rank's gradient block is w1's and w2's padded shards (f is
  // frozen: not there), f32, and the all-to-all sends W - 1 of its W blocks.
  auto ceil_div = [](int a, int b) { return (a + b - 1) / b; };
  const std::size_t block = static_cast<std::size_t>(ceil_div(4, W) * 5 + ceil_div(5, W) * 3);
  const auto a2a = rec.of(ctg::dist::collective::all_to_all);
  check(a2a.calls == 1, "one all-to-all per step");
  check(a2a.bytes_sent == static_cast<std::size_t>(W - 1) * block * sizeof(float),
        "all-to-all bytes: " + std::to_string(a2a.bytes_sent));
  // The parameters' gather: w1 in bf16 (2 bytes), w2 in f32; f not at all.
  const std::size_t params = static_cast<std::size_t>(ceil_div(4, W) * 5 * 2 + ceil_div(5, W) * 3 * 4);
  const auto ag = rec.of(ctg::dist::collective::all_gather);
  const std::size_t small = sizeof(ctg::dist::detail::run_report) + sizeof(double) +  // agreement, loss
                            2 * sizeof(double) * 2;                                  // per-leaf checks
  check(ag.bytes_sent == static_cast<std::size_t>(W - 1) * (params + small),
        "all-gather bytes: " + std::to_string(ag.bytes_sent));
  if (comm.rank() == 0)
    std::printf("bytes sent per step by each of %d ranks: gradients %zu (all-to-all), all-gathers %zu\n", W,
                a2a.bytes_sent, ag.bytes_sent);
}

// W ranks against one process fed the global batch (the plain store and
// optim::adamw), 5 steps. The bound (tests/unit/data_parallel.cpp derives
// it): w1 is bf16, so each rank's gradient rounds to bf16 before the f32
// sum (2^-9 relative) where one process rounds the whole once; AdamW turns
// that into at most lr * 2^-8 per step: 5 * lr * 2^-8 after 5 steps (plus
// one bf16 ulp of w1), and losses within 2^-8 relative.
void against_one_process(ctg::dist::communicator& comm) {
  const int W = comm.size(), r = comm.rank();
  auto step = ctg::value_and_grad(mlp_loss());
  ctg::cpu::device dev{1};
  auto ranks = ctg::make_store(dev, step), one = ctg::make_store(dev, step);
  ctg::nn::init_params(ranks, 3, 0.5);
  ctg::nn::init_params(one, 3, 0.5);
  constexpr float lr = 0.02f;
  ctg::dist::data_parallel dp(ranks, comm);
  ctg::dist::sharded_adamw opt(dp, {.lr = lr});
  ctg::optim::adamw plain(one, {.lr = lr});
  const int rows = 2, all = rows * W;
  std::vector<float> x(static_cast<std::size_t>(all) * 4), y(static_cast<std::size_t>(all) * 3);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i));
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = 0.3f * std::cos(static_cast<float>(i));
  const auto xr = std::span<const float>(x).subspan(static_cast<std::size_t>(r * rows * 4), rows * 4);
  const auto yr = std::span<const float>(y).subspan(static_cast<std::size_t>(r * rows * 3), rows * 3);
  for (int s = 0; s < 5; ++s) {
    step(ranks, ctg::feed<X>(xr, rows), ctg::feed<Y>(yr, rows));
    const float whole = step(one, ctg::feed<X>(x, all), ctg::feed<Y>(y, all));
    check(std::abs(dp.loss() - whole) <= 0x1p-8f * whole, "against one process: loss at step " + std::to_string(s));
    opt.step();
    plain.step(one);
  }
  const float moved = 5 * lr * 0x1p-8f;
  auto w1a = ranks.param<W1>(), w1b = one.param<W1>();
  for (std::size_t i = 0; i < w1a.size(); ++i) {
    const float a = ctg::to_float(w1a[i]), b = ctg::to_float(w1b[i]);
    check(std::abs(a - b) <= moved + std::abs(b) * 0x1p-8f, "against one process: w1");
  }
  auto w2a = ranks.param<W2>(), w2b = one.param<W2>();
  for (std::size_t i = 0; i < w2a.size(); ++i) check(std::abs(w2a[i] - w2b[i]) <= moved, "against one process: w2");
}

void mistakes(ctg::dist::communicator& comm) {
  const int r = comm.rank();
  auto step = train_step<pr::full<ctg::bf16>>();
  ctg::cpu::device dev{1};
  auto s = ctg::make_store(dev, step);
  ctg::nn::init_params(s, r == 1 ? 5 : 4, 0.3);  // rank 1 initialised another way
  check(message_of([&] { ctg::dist::data_parallel dp(s, comm); }).find("rank 1's parameters or FP8 state differ") !=
            std::string::npos,
        "different parameters: an error on every rank");
  ctg::nn::init_params(s, 4, 0.3);
  s.seed(r == 1 ? 7 : 8);  // rank 1's dropout seed another
  check(message_of([&] { ctg::dist::data_parallel dp(s, comm); }).find("rank 1's dropout seed differs from rank 0's") !=
            std::string::npos,
        "different seeds: an error on every rank");
  s.seed(8);
  // Rank 1 holds the layers in shards, the others whole (or keeps them after
  // forward): its layer gathers inside the step waited for ranks that gather
  // none (a hang, or MPI_ERR_TRUNCATE on one rank only).
  for (const ctg::dist::fsdp rank1 : {ctg::dist::fsdp{}, ctg::dist::fsdp{.reshard_after_forward = false}}) {
    const std::string mode = message_of([&] {
      if (r == 1) ctg::dist::data_parallel dp(s, comm, rank1);
      else if (rank1.reshard_after_forward) ctg::dist::data_parallel dp(s, comm);
      else ctg::dist::data_parallel dp(s, comm, ctg::dist::fsdp{});
    });
    const std::string want = rank1.reshard_after_forward
                                 ? "rank 1 makes its data_parallel with dist::fsdp{}, rank 0 without dist::fsdp"
                                 : "rank 1 makes its data_parallel with dist::fsdp{.reshard_after_forward = false}, "
                                   "rank 0 with dist::fsdp{}";
    check(mode.find(want) != std::string::npos, "different parameter sharding: an error on every rank: " + mode);
  }
  ctg::dist::data_parallel dp(s, comm);
  ctg::dist::sharded_adamw opt(dp);
  const auto before = all_values(s);
  // Rank 1 feeds one sequence, the others two.
  const std::string sizes = message_of([&] { run(step, s, batch_of(0, r), r == 1 ? 1 : batch); });
  check(sizes.find("batches of different sizes (rank 0: dyn sizes 2, 5, 5, 2, 5; rank 1: dyn sizes 1, 5, 5, 1, 5)") !=
            std::string::npos,
        "different sizes: " + sizes);
  // Rank 1 feeds a target outside [0, 11).
  tokens bad = batch_of(0, r);
  if (r == 1) bad.tg[3] = 11;
  const std::string ids = message_of([&] { run(step, s, bad); });
  check(r == 1 ? ids.find("targets") != std::string::npos
               : ids.find("rank 1 failed this step, so no rank committed it") != std::string::npos,
        "a bad id on rank 1: " + ids);
  // Rank 1 makes steps of 2 micro-batches, the others of 1: an error at the
  // first run (their collectives paired up wrongly: a hang).
  if (r == 1) dp.accumulate(2);
  const std::string micro = message_of([&] { run(step, s, batch_of(0, r)); });
  check(micro.find("rank 1 makes steps of 2 micro-batches, rank 0 of 1") != std::string::npos,
        "different micro-batch counts: " + micro);
  if (r == 1) dp.accumulate(1);
  check(message_of([&] { opt.step(); }).find("no gradients since the last update (each set is applied once)") != std::string::npos,
        "no update after failed steps");
  check(all_values(s) == before, "failed steps changed nothing");
  run(step, s, batch_of(0, r));  // and the next good step works on every rank
  opt.step();
  check(all_values(s) != before, "a good step after the mistakes");

  // The same under fsdp, whose runs gather layers as they go: a bad id on
  // rank 1 stops every rank before any gather (never a hang), and the next
  // good step works.
  auto s2 = ctg::make_store(dev, step);
  ctg::nn::init_params(s2, 4, 0.3);
  ctg::dist::data_parallel fs(s2, comm, ctg::dist::fsdp{});
  ctg::dist::sharded_adamw fopt(fs);
  const std::string fsdp_ids = message_of([&] { run(step, s2, bad); });
  check(r == 1 ? fsdp_ids.find("targets") != std::string::npos
               : fsdp_ids.find("rank 1 failed this step, so no rank committed it") != std::string::npos,
        "fsdp: a bad id on rank 1: " + fsdp_ids);
  const std::string fsdp_sizes = message_of([&] { run(step, s2, batch_of(0, r), r == 1 ? 1 : batch); });
  check(fsdp_sizes.find("batches of different sizes") != std::string::npos, "fsdp: different sizes: " + fsdp_sizes);
  run(step, s2, batch_of(1, r));
  fopt.step();

  // When an fsdp data_parallel of real ranks ends, its store holds its own
  // rows only: running it alone is an error, not a run on missing values.
  auto s3 = ctg::make_store(dev, step);
  ctg::nn::init_params(s3, 4, 0.3);
  { ctg::dist::data_parallel<decltype(s3)> ended(s3, comm, ctg::dist::fsdp{}); }
  const std::string alone = message_of([&] { run(step, s3, batch_of(0, r)); });
  check(alone.find("is held in shards by dist::data_parallel with dist::fsdp") != std::string::npos,
        "fsdp: the store alone after its data_parallel ended: " + alone);

  // A data_parallel made again on a store whose first one ended: the
  // store's count is the global runs (rank 1 was refused: 'has run 5
  // steps, rank 0 4', its count taken for steps and made global again).
  auto s4 = ctg::make_store(dev, step);
  ctg::nn::init_params(s4, 4, 0.3);
  {
    ctg::dist::data_parallel<decltype(s4)> first(s4, comm);
    run(step, s4, batch_of(0, r));
  }
  check(s4.steps_run() == static_cast<std::uint64_t>(comm.size()), "the global runs after one step");
  const std::string again = message_of([&] { ctg::dist::data_parallel<decltype(s4)> second(s4, comm); });
  check(again == "<no ctg::error>", "a data_parallel made again: " + again);
}
// FP8 all-gather: a weight used as shard(quantize(w)) travels as fp8 bytes.
using Xq = ctg::input<"xq", ctg::f32, dyn, 32>;
using Tq = ctg::input<"tq", ctg::f32, dyn, 16>;
using Wq = ctg::param<"wq", ctg::bf16, 32, 16>;
template <ctg::fixed_string Name>
using Sq = ctg::scaling::delayed<Name, pr::delayed<4>>;
// The weight's scale from its latest amax alone: every update changes it,
// so a payload cast before a committed step is stale (fp8_detour).
using Sw = ctg::scaling::delayed<"wq", pr::delayed<1>>;
template <bool Shard>
auto fp8_loss() {
  auto wq = [] {
    if constexpr (Shard) return ctg::dist::shard(ctg::quantize<ctg::e4m3, Sw>(Wq{}));
    else return ctg::quantize<ctg::e4m3, Sw>(Wq{});
  }();
  auto y = ctg::fp8_matmul<ctg::f32, Sq<"g">>(ctg::quantize<ctg::e4m3, Sq<"x">>(Xq{}), wq);
  return ctg::mean(ctg::square(y - Tq{}));
}
template <bool Shard>
struct fp8_run {
  std::vector<float> losses, norms;
  std::vector<unsigned char> values;
  std::size_t largest_gather = 0;  // bytes of the parameters' all-gather, per step
  bool provided = false;           // the store took the payload from the gather
};
// How train_fp8 departs from step, update, step, update...
enum class fp8_detour {
  none,
  unapplied,   // at step 1: the update fails (a bad lr), then a second step replaces the first's gradient
  whole_write  // after the first update: the weight made whole, then halved on every rank
};
template <bool Shard>
fp8_run<Shard> train_fp8(ctg::dist::communicator& comm, bool emulated, fp8_detour detour = fp8_detour::none) {
  const int W = comm.size(), r = comm.rank();
  auto step = ctg::value_and_grad(fp8_loss<Shard>());
  ctg::cpu::device dev{1};
  auto s = ctg::make_store(dev, step);
  ctg::nn::init_params(s, 9, 0.5);
  ctg::dist::recording_comm rec(comm);
  using dp_t = ctg::dist::data_parallel<decltype(s)>;
  static_assert((dp_t::fp8_quantizer[0] != ctg::dist::detail::none) == Shard);
  dp_t dp = emulated ? dp_t(s, ctg::dist::emulate{W}) : dp_t(s, rec);
  ctg::dist::sharded_adamw opt(dp, {.lr = 0.05f});
  fp8_run<Shard> out;
  std::vector<float> x(3 * 32), t(3 * 16);
  auto run_step = [&](int k, float amplitude) {
    for (int v = emulated ? 0 : r; v < (emulated ? W : r + 1); ++v) {
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = amplitude * std::sin(0.37f * static_cast<float>(i + 7 * v + 3 * k));
      for (std::size_t i = 0; i < t.size(); ++i) t[i] = 0.2f * std::cos(0.11f * static_cast<float>(i + v));
      step(s, ctg::feed<Xq>(x, 3), ctg::feed<Tq>(t, 3));
    }
  };
  for (int k = 0; k < 5; ++k) {
    if (detour == fp8_detour::unapplied && k == 1) {
      // (larger inputs: the committed step changes the scales the next one casts with)
      run_step(k, 8.0f);
      check(!message_of([&] { opt.step(std::nanf("")); }).empty(), "fp8 gather: an update with a NaN lr fails");
    }
    run_step(k, 1.0f);
    if (k > 0) out.provided = out.provided || dp.provided(dp_t::fp8_quantizer[0]) != nullptr;
    rec.reset();
    out.losses.push_back(dp.loss());
    if (detour == fp8_detour::whole_write && k == 1) {
      // (a bf16 weight written since its update: the update refuses, on every rank alike)
      check(message_of([&] { opt.step(); }).find("was written after the optimizer last set it") != std::string::npos,
            "fp8 gather: the update after a write refuses");
      break;
    }
    out.norms.push_back(opt.step());
    out.largest_gather = rec.of(ctg::dist::collective::all_gather).largest;
    if (detour == fp8_detour::whole_write && k == 0) {
      opt.gather_whole_parameters();
      for (auto& w : s.template param<Wq>()) w = ctg::bf16(0.5f * ctg::load_as(w));
    }
  }
  opt.gather_whole_parameters();
  out.values = all_values(s);
  return out;
}
void fp8_all_gather(ctg::dist::communicator& comm) {
  const auto real = train_fp8<true>(comm, false), solo = train_fp8<true>(comm, true);
  const auto bf16 = train_fp8<false>(comm, false);
  // The fp8 payload gathered from shards is the whole weight's quantize, bit
  // for bit: the same losses, norms, weights and FP8 state as one process
  // holding every shard, and as the ranks gathering the bf16 weight.
  check(real.provided, "fp8 gather: the store used the gathered payload");
  for (const auto* o : {&solo.losses, &bf16.losses}) check(real.losses == *o, "fp8 gather: losses");
  for (const auto* o : {&solo.norms, &bf16.norms}) check(real.norms == *o, "fp8 gather: gradient norms");
  check(real.values == solo.values && real.values == bf16.values, "fp8 gather: weights, scales, histories");
  check(real.losses.back() < real.losses.front(), "fp8 gather: the loss falls");
  // A committed step whose gradient no update applied changed the scales
  // the gathered payload was cast with, and a weight made whole was then
  // written: the next steps quantize with the current scale and the
  // written weight, as one process does. (The payload of the last gather,
  // and its scale, were used: other losses on real ranks.)
  for (const fp8_detour d : {fp8_detour::unapplied, fp8_detour::whole_write}) {
    const char* what = d == fp8_detour::unapplied ? "fp8 gather, an update skipped" : "fp8 gather, a write";
    const auto real_d = train_fp8<true>(comm, false, d), solo_d = train_fp8<true>(comm, true, d);
    check(real_d.losses == solo_d.losses, std::string(what) + ": losses");
    check(real_d.norms == solo_d.norms, std::string(what) + ": gradient norms");
    check(real_d.values == solo_d.values, std::string(what) + ": weights, scales, histories");
    check(real_d.losses != real.losses, std::string(what) + ": the detour changed the run");
  }
  const double ratio = static_cast<double>(real.largest_gather) / static_cast<double>(bf16.largest_gather);
  check(ratio <= 0.52, "fp8 gather moves " + std::to_string(ratio) + " of the bf16 gather's bytes");
  if (comm.rank() == 0)
    std::printf("fp8 all-gather on %d ranks: %zu bytes per rank per step against %zu in bf16 (%.3fx); bitwise equal\n",
                comm.size(), real.largest_gather, bf16.largest_gather, ratio);
}

// Between steps, a weight gathered as fp8 is whole only in this rank's
// rows (the steps read the gathered bytes): reading it whole is an error
// until gather_whole_parameters(), then every rank reads the same weight.
// (An evaluation step sharing the store read the stale rows: each rank got
// another value.) Once the data_parallel ends, the store alone is an error
// until a load writes the weight whole.
void fp8_rows_only(ctg::dist::communicator& comm) {
  const int r = comm.rank();
  const std::string file = "ctg_mpi_rows_only_np" + std::to_string(comm.size()) + ".ctg";
  auto step = ctg::value_and_grad(fp8_loss<true>());
  auto eval = ctg::forward(ctg::sum(ctg::matmul(Xq{}, ctg::cast<ctg::f32>(Wq{}))));
  ctg::cpu::device dev{1};
  auto s = ctg::make_store(dev, step, eval);
  ctg::nn::init_params(s, 9, 0.5);
  std::vector<float> x(3 * 32), t(3 * 16, 0.1f);
  const std::string rows_only = "'wq' is whole only in this rank's rows";
  {
    ctg::dist::data_parallel dp(s, comm);
    ctg::dist::sharded_adamw opt(dp, {.lr = 0.05f});
    for (int k = 0; k < 2; ++k) {
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i + 7 * r + 3 * k));
      step(s, ctg::feed<Xq>(x, 3), ctg::feed<Tq>(t, 3));
      opt.step();
    }
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.5f * static_cast<float>(i));
    const std::string evaluated = message_of([&] { eval(s, ctg::feed<Xq>(x, 3)); });
    check(evaluated.find(rows_only) != std::string::npos, "fp8 rows only: an evaluation step: " + evaluated);
    const std::string read = message_of([&] { (void)s.param<Wq>(); });
    check(read.find(rows_only) != std::string::npos, "fp8 rows only: param<W>(): " + read);
    opt.gather_whole_parameters();
    eval(s, ctg::feed<Xq>(x, 3));
    const float mine = s.value(eval)[0];
    std::vector<float> every(static_cast<std::size_t>(comm.size()));
    comm.all_gather(std::span<const float>(&mine, 1), std::span(every));
    for (float v : every) check(std::bit_cast<std::uint32_t>(v) == std::bit_cast<std::uint32_t>(every[0]),
                                "fp8 rows only: every rank evaluates the same weight once it is whole");
    step(s, ctg::feed<Xq>(x, 3), ctg::feed<Tq>(t, 3));  // (the training step goes on after the gather)
    opt.step();
    ctg::dist::save(file, dp, opt);  // (whole for the save, then in rows only again after the next update)
    step(s, ctg::feed<Xq>(x, 3), ctg::feed<Tq>(t, 3));
    opt.step();
  }
  const std::string alone = message_of([&] { step(s, ctg::feed<Xq>(x, 3), ctg::feed<Tq>(t, 3)); });
  check(alone.find(rows_only) != std::string::npos, "fp8 rows only: the store alone after its data_parallel: " + alone);
  // A load writes the weight whole: the store runs alone again, as a fresh
  // store loaded from the file does. (Its param() threw: no load took it.)
  const std::string missing = message_of([&] { ctg::io::load(file + ".none", s); });
  check(!missing.empty() && message_of([&] { (void)s.param<Wq>(); }).find(rows_only) != std::string::npos,
        "fp8 rows only: a failed load leaves the weight in rows only");
  ctg::io::load(file, s);
  auto fresh = ctg::make_store(dev, step, eval);
  ctg::io::load(file, fresh);
  const float mine = step(s, ctg::feed<Xq>(x, 3), ctg::feed<Tq>(t, 3));
  const float theirs = step(fresh, ctg::feed<Xq>(x, 3), ctg::feed<Tq>(t, 3));
  check(std::bit_cast<std::uint32_t>(mine) == std::bit_cast<std::uint32_t>(theirs),
        "fp8 rows only: loaded, the store alone runs as a fresh one loaded");
  int done = 1;  // (every rank has read the file before rank 0 removes it)
  std::vector<int> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const int>(&done, 1), std::span(all));
  if (r == 0) std::remove(file.c_str());
}

// Resume at the same world: bit for bit the run that never stopped (dropout
// on). With `fsdp`, both runs hold the stack's parameters in shards. Returns
// the losses of the steps after the save.
std::vector<float> resume_exact(ctg::dist::communicator& comm, const std::string& file, bool fsdp) {
  const int r = comm.rank();
  auto step = train_step<pr::full<ctg::bf16>>();
  ctg::cpu::device dev{1};
  using store_t = decltype(ctg::make_store(dev, step));
  auto in_world = [&](store_t& s) {
    return fsdp ? ctg::dist::data_parallel<store_t>(s, comm, ctg::dist::fsdp{}) : ctg::dist::data_parallel<store_t>(s, comm);
  };
  auto a = ctg::make_store(dev, step);
  a.seed(7);
  ctg::nn::init_params(a, 4, 0.3);
  auto dp = in_world(a);
  ctg::dist::sharded_adamw opt(dp, {.lr = 0.02f});
  for (int s = 0; s < 3; ++s) {
    run(step, a, batch_of(s, r));
    opt.step();
  }
  ctg::dist::save(file, dp, opt);
  std::vector<float> went_on;
  for (int s = 3; s < 5; ++s) {
    run(step, a, batch_of(s, r));
    opt.step();
    went_on.push_back(dp.loss());
  }
  auto b = ctg::make_store(dev, step);  // a fresh store: everything comes from the file
  auto dq = in_world(b);
  ctg::dist::sharded_adamw qopt(dq);
  ctg::dist::load(file, dq, qopt);
  for (int s = 3; s < 5; ++s) {
    run(step, b, batch_of(s, r));
    qopt.step();
    check(std::bit_cast<std::uint32_t>(dq.loss()) == std::bit_cast<std::uint32_t>(went_on[static_cast<std::size_t>(s - 3)]),
          "resumed loss at step " + std::to_string(s));
  }
  opt.gather_whole_parameters();
  qopt.gather_whole_parameters();
  check(all_values(a) == all_values(b), "resumed parameters and FP8 state");
  return went_on;
}

// A file saved at W ranks loads into one process (the plain optimizer) and
// at W + 1 emulated ranks: the same values, and the next loss of one global
// batch (6 rows) within the rounding of its sums.
void across_world_sizes(ctg::dist::communicator& comm, const std::string& file) {
  const int W = comm.size(), r = comm.rank();
  auto step = ctg::value_and_grad(mlp_loss());
  ctg::cpu::device dev{1};
  std::vector<float> x(6 * 4), y(6 * 3);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(static_cast<int>(i % 9) - 4);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = 0.05f * static_cast<float>(i % 7);
  const int rows = 6 / W;  // (W is 2 or 3)
  auto mine = [&](int rank, int n, auto& v, int width) {
    return std::span<const float>(v).subspan(static_cast<std::size_t>(rank * n * width), static_cast<std::size_t>(n * width));
  };
  auto a = ctg::make_store(dev, step);
  ctg::nn::init_params(a, 3, 0.5);
  ctg::dist::data_parallel dp(a, comm);
  ctg::dist::sharded_adamw opt(dp, {.lr = 0.05f});
  for (int s = 0; s < 2; ++s) {
    step(a, ctg::feed<X>(mine(r, rows, x, 4), rows), ctg::feed<Y>(mine(r, rows, y, 3), rows));
    opt.step();
  }
  ctg::dist::save(file, dp, opt);
  step(a, ctg::feed<X>(mine(r, rows, x, 4), rows), ctg::feed<Y>(mine(r, rows, y, 3), rows));
  const float next = dp.loss();

  auto one = ctg::make_store(dev, step);
  ctg::optim::adamw popt(one);
  ctg::io::load(file, one, popt);
  check(popt.steps() == 2, "one process: AdamW's step count");
  const float whole = step(one, ctg::feed<X>(x, 6), ctg::feed<Y>(y, 6));
  check(std::abs(whole - next) <= 1e-6f * next, "one process: the next loss");

  const int W2 = W + 1;
  auto more = ctg::make_store(dev, step);
  ctg::dist::data_parallel dm(more, ctg::dist::emulate{W2});
  ctg::dist::sharded_adamw mopt(dm);
  ctg::dist::load(file, dm, mopt);
  check(all_values(more) == all_values(one), std::to_string(W2) + " emulated ranks: the file's values");
  const int rows2 = 6 / W2;  // (3 -> 4 ranks: 6 rows do not divide; 1 row each, a batch of 4)
  for (int v = 0; v < W2; ++v)
    step(more, ctg::feed<X>(mine(v, rows2, x, 4), rows2), ctg::feed<Y>(mine(v, rows2, y, 3), rows2));
  if (6 % W2 == 0) check(std::abs(dm.loss() - next) <= 1e-6f * next, std::to_string(W2) + " ranks: the next loss");
  if (r == 0)
    std::printf("checkpoint saved at %d ranks: next loss %.7f there, %.7f in one process, %.7f at %d ranks\n", W,
                static_cast<double>(next), static_cast<double>(whole), static_cast<double>(dm.loss()), W2);
}
}  // namespace

int main(int argc, char** argv) {
  ctg::dist::mpi_comm comm{argc, argv};
  my_rank = comm.rank();
  try {
    world_equals_emulation<pr::full<ctg::bf16>>(comm, "bf16");
    world_equals_emulation<pr::fp8<pr::delayed<>>>(comm, "fp8 delayed");
    world_equals_emulation<pr::fp8<pr::delayed<>>>(comm, "fp8 delayed", 2);
    world_equals_emulation<pr::sharded<pr::fp8<pr::delayed<>>>>(comm, "sharded<fp8 delayed>");
    world_equals_emulation<pr::full<ctg::bf16>>(comm, "bf16", 1, ctg::dist::fsdp{});
    world_equals_emulation<pr::fp8<pr::delayed<>>>(comm, "fp8 delayed", 2, ctg::dist::fsdp{.reshard_after_forward = false});
    world_equals_emulation<pr::sharded<pr::fp8<pr::delayed<>>>>(comm, "sharded<fp8 delayed>", 1, ctg::dist::fsdp{});
    fsdp_bytes<pr::full<ctg::bf16>>(comm, "bf16");
    fsdp_bytes<pr::sharded<pr::fp8<pr::delayed<>>>>(comm, "sharded<fp8 delayed>");
    bytes_moved(comm);
    against_one_process(comm);
    if (comm.size() >= 2) fp8_all_gather(comm);
    if (comm.size() >= 2) fp8_rows_only(comm);
    if (comm.size() >= 2) mistakes(comm);
    // One file name on every rank (rank 0 writes it; all read it).
    const std::string file = "ctg_mpi_ckpt_np" + std::to_string(comm.size()) + ".ctg";
    const auto whole = resume_exact(comm, file, false), sharded = resume_exact(comm, file, true);
    check(whole == sharded, "fsdp: saved, resumed and trained as the default run");
    across_world_sizes(comm, file);
    int done = 1;  // (every rank has read the file before rank 0 removes it)
    std::vector<int> all(static_cast<std::size_t>(comm.size()));
    comm.all_gather(std::span<const int>(&done, 1), std::span(all));
    if (comm.rank() == 0) std::remove(file.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: unexpected exception: %s\n", my_rank, e.what());
    return 1;
  }
  if (failures) std::fprintf(stderr, "rank %d: %d checks failed\n", my_rank, failures);
  return failures ? 1 : 0;
}

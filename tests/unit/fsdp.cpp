// dist::fsdp in one process (W emulated ranks; tests/mpi runs real ranks):
// a stack's parameters live in shards only and each layer is gathered as it
// runs. Against the default data parallelism (every parameter whole between
// steps), the same run gives the same bits; the store keeps no copy of the
// stack's parameters; checkpoints are the same file.
#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <optional>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/dist/checkpoint.hpp>
#include <ctg/optim/optim.hpp>

#include "temp_files.hpp"

#include "../common/stored_values.hpp"
#include "../common/tiny_transformer.hpp"

namespace {
using ctg::dyn;
using ctg::i32;

using config = test_util::tiny_transformer_config<3>;
using test_util::Ids, test_util::Pos, test_util::Tg;
template <class Policy>
using step_of = decltype(ctg::value_and_grad(ctg::nn::transformer<config, Policy>::loss(Ids{}, Pos{}, Tg{})));
template <class Step>
using store_of = decltype(ctg::make_store(std::declval<ctg::cpu::device&>(), std::declval<Step&>()));
using step_t = step_of<ctg::precision::full<ctg::bf16>>;
using store_t = store_of<step_t>;
using dp_t = ctg::dist::data_parallel<store_t>;
// Every weight product shard(quantize(w)): the layers' weights gather as fp8.
using fp8_step_t = step_of<ctg::precision::sharded<ctg::precision::fp8<ctg::precision::delayed<>>>>;
using fp8_dp_t = ctg::dist::data_parallel<store_of<fp8_step_t>>;

constexpr int T = 5;
// Run v of step s: `b` sequences of 5 tokens, a function of (s, v) only.
template <class Step, class Store>
void run(Step& step, Store& st, int s, int v, int b = 2) {
  std::vector<i32> ids(static_cast<std::size_t>(b * T)), tg(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<i32>((7 * s + 5 * v + 3 * i) % 11);
    tg[i] = static_cast<i32>((2 * s + 3 * v + i * i) % 11);
  }
  static const std::vector<i32> pos{0, 1, 2, 3, 4};
  step(st, ctg::feed<Ids>(ids, b, T), ctg::feed<Pos>(pos, T), ctg::feed<Tg>(tg, b, T));
}

using test_util::all_values;

// One trainer: a store in a W-rank emulated world, with or without fsdp.
template <class Step>
struct trainer_of {
  Step step;
  ctg::cpu::device dev{1};
  store_of<Step> store = ctg::make_store(dev, step);
  std::optional<ctg::dist::data_parallel<store_of<Step>>> dp;
  std::optional<ctg::dist::sharded_adamw<store_of<Step>>> opt;
  trainer_of(int world, std::optional<ctg::dist::fsdp> f) {
    store.seed(2026);
    ctg::nn::init_params(store, 4, 0.3);
    if (f) dp.emplace(store, ctg::dist::emulate{world}, *f);
    else dp.emplace(store, ctg::dist::emulate{world});
    opt.emplace(*dp, ctg::optim::adamw_config{.lr = 0.02f, .max_grad_norm = 1.0f});
  }
  // One step (every emulated rank's run), then the update: the loss and the norm.
  std::pair<float, float> train(int s) {
    for (int v = 0; v < dp->world(); ++v) run(step, store, s, v);
    const float loss = dp->loss();
    return {loss, opt->step()};
  }
};
using trainer = trainer_of<step_t>;

// The first of the stack's trainable leaves (its first layer norm's scales).
constexpr std::size_t first_stacked = [] {
  std::size_t k = 0;
  while (dp_t::shards_type::stack_of[k] == ctg::dist::detail::none) ++k;
  return k;
}();
using Up = ctg::tl::at_t<first_stacked, step_t::wrt>;
}  // namespace

TEST_CASE("fsdp: W emulated ranks train bit for bit as the default data parallelism, resharding or keeping") {
  for (const int world : {2, 3})
    for (const bool reshard : {true, false}) {
      CAPTURE(world);
      CAPTURE(reshard);
      trainer whole(world, std::nullopt), sharded(world, ctg::dist::fsdp{.reshard_after_forward = reshard});
      for (int s = 0; s < 4; ++s) {
        CAPTURE(s);
        const auto a = whole.train(s), b = sharded.train(s);
        CHECK(std::bit_cast<std::uint32_t>(a.first) == std::bit_cast<std::uint32_t>(b.first));
        CHECK(std::bit_cast<std::uint32_t>(a.second) == std::bit_cast<std::uint32_t>(b.second));
        for (int h = 0; h < world; ++h) {
          const auto ga = whole.dp->grad_shard(h), gb = sharded.dp->grad_shard(h);
          CHECK(std::memcmp(ga.data(), gb.data(), ga.size_bytes()) == 0);
        }
      }
      // The stack's parameters are whole only when asked for.
      CHECK_THROWS_WITH_AS(sharded.store.param<Up>(), doctest::Contains("is held in shards"), ctg::error);
      sharded.opt->gather_whole_parameters();
      CHECK(all_values(whole.store) == all_values(sharded.store));
      // The next run takes them back into shards; it still trains the same.
      CHECK(whole.train(4) == sharded.train(4));
      CHECK_THROWS_AS(sharded.store.param<Up>(), ctg::error);
    }
}

TEST_CASE("fsdp: the store keeps no copy of the stack's parameters; one layer is gathered at a time") {
  trainer whole(2, std::nullopt);
  trainer reshard(2, ctg::dist::fsdp{});
  trainer keep(2, ctg::dist::fsdp{.reshard_after_forward = false});
  // The stack's trainable leaves, by hand: per layer, attention q, k, v, o
  // (2 heads of 8 x 4 each), the MLP's gate and up (8 x 12) and down (12 x
  // 8), two norms' scales (8); bf16.
  constexpr std::size_t per_layer = 4 * 64 + 3 * 96 + 2 * 8, layers = config::layers;
  const std::size_t dropped = whole.store.stored_bytes() - reshard.store.stored_bytes();
  CHECK(dropped >= layers * per_layer * 2);
  CHECK(dropped < layers * per_layer * 2 + 9 * 64);  // (each leaf's bytes rounded up to 64)
  CHECK(keep.store.stored_bytes() == reshard.store.stored_bytes());
  CHECK(whole.dp->resident_bytes() == 0);
  // Two emulated ranks hold both shards: each leaf's rows of every layer, padded to the shard size.
  CHECK(reshard.dp->resident_bytes() >= layers * per_layer * 2);
  CHECK(reshard.dp->resident_bytes() < layers * per_layer * 2 + 2 * 9 * 64);
  // Gathered: one layer (resharding after forward) or every layer (keeping).
  CHECK(reshard.dp->gathered_bytes() >= per_layer * 2);
  CHECK(reshard.dp->gathered_bytes() < per_layer * 2 + 9 * 64);
  CHECK(keep.dp->gathered_bytes() >= layers * per_layer * 2);
  CHECK(keep.dp->gathered_bytes() < layers * per_layer * 2 + 9 * 64);
}

TEST_CASE("fsdp: init_params while the stacks are held in shards is an error that writes no leaf") {
  // (It wrote the leaves before the first stacked one, then threw: a half-initialised model trained on.)
  static_assert(first_stacked > 0);  // (leaf 0 is outside the stack: the store holds it)
  trainer reshard(2, ctg::dist::fsdp{});
  const auto before = reshard.store.param<ctg::tl::at_t<0, step_t::wrt>>();
  const std::vector<ctg::bf16> first(before.begin(), before.end());
  CHECK_THROWS_WITH_AS(ctg::nn::init_params(reshard.store, 99, 0.3), doctest::Contains("is held in shards"), ctg::error);
  const auto after = reshard.store.param<ctg::tl::at_t<0, step_t::wrt>>();
  CHECK(std::memcmp(first.data(), after.data(), after.size_bytes()) == 0);
}

TEST_CASE("fsdp: a data_parallel that cannot be made leaves the store as it was, its stack's parameters whole") {
  // (Its shards took the store's copy of the stack's parameters, then a
  // later check threw: the weights were freed, and a group's next run
  // read null parameters.)
  step_t step;
  ctg::cpu::device dev{1};
  auto store = ctg::make_store(dev, step), twin = ctg::make_store(dev, step);
  for (auto* s : {&store, &twin}) {
    s->seed(2026);
    ctg::nn::init_params(*s, 4, 0.3);
    s->accumulate(2);
    run(step, *s, 0, 0);
  }
  const auto before = all_values(store);
  // A set of micro-batches under way.
  CHECK_THROWS_WITH_AS(dp_t(store, ctg::dist::emulate{2}, ctg::dist::fsdp{}),
                       doctest::Contains("rank 0's store is in the middle of a set of micro-batches"), ctg::error);
  CHECK(store.holds_stacked_params());
  CHECK(all_values(store) == before);
  CHECK(store.micro_batches() == 2);
  run(step, store, 0, 1);  // the set goes on as the twin's
  run(step, twin, 0, 1);
  CHECK(std::memcmp(store.grad<Up>().data(), twin.grad<Up>().data(), store.grad<Up>().size_bytes()) == 0);
  // A store in another data_parallel already.
  store.accumulate(1);
  twin.accumulate(1);
  dp_t first(store, ctg::dist::emulate{2}), twin_dp(twin, ctg::dist::emulate{2});
  CHECK_THROWS_WITH_AS(dp_t(store, ctg::dist::emulate{2}, ctg::dist::fsdp{}),
                       doctest::Contains("rank 0's store runs in another data_parallel already"), ctg::error);
  CHECK(store.holds_stacked_params());
  for (int v = 0; v < 2; ++v) run(step, store, 1, v), run(step, twin, 1, v);  // the first group runs on
  CHECK(std::bit_cast<std::uint32_t>(first.loss()) == std::bit_cast<std::uint32_t>(twin_dp.loss()));
  // Moved while its data_parallel runs it: refused, nothing moved.
  CHECK_THROWS_WITH_AS([&] { auto moved = std::move(store); }(),
                       doctest::Contains("ctg: a store in a data_parallel cannot be moved or copied"), ctg::error);
  CHECK(store.identity() != 0);
  CHECK(all_values(store) == all_values(twin));
}

TEST_CASE("fsdp: a run fed another shape fails and the step counts for nothing; run again, it is the default's") {
  trainer whole(2, std::nullopt), sharded(2, ctg::dist::fsdp{});
  run(sharded.step, sharded.store, 0, 0);
  CHECK_THROWS_WITH_AS(run(sharded.step, sharded.store, 0, 1, 3), doctest::Contains("different sizes"), ctg::error);
  CHECK_FALSE(sharded.dp->has_gradient());
  CHECK(sharded.dp->runs_done() == 0);  // (as on real ranks, rank 0's run is undone too)
  run(sharded.step, sharded.store, 0, 0);  // (the step again, fed well: complete)
  run(sharded.step, sharded.store, 0, 1);
  REQUIRE(sharded.dp->has_gradient());
  const std::pair<float, float> b{sharded.dp->loss(), sharded.opt->step()};
  CHECK(whole.train(0) == b);
}

TEST_CASE("fsdp: checkpoints are the default run's file; they load at another world size") {
  test_util::temp_dir dir("fsdp");
  const auto fw = dir / "whole.ctg", fs = dir / "sharded.ctg";
  trainer whole(2, std::nullopt), sharded(2, ctg::dist::fsdp{});
  for (int s = 0; s < 2; ++s) {
    whole.train(s);
    sharded.train(s);
  }
  ctg::dist::save(fw.string(), *whole.dp, *whole.opt);
  ctg::dist::save(fs.string(), *sharded.dp, *sharded.opt);
  CHECK(test_util::read_all(fw) == test_util::read_all(fs));
  CHECK_THROWS_AS(sharded.store.param<Up>(), ctg::error);  // (saving made them whole for a moment only)
  // Loaded at 3 emulated ranks, with and without fsdp: the same next step.
  trainer a(3, std::nullopt), b(3, ctg::dist::fsdp{});
  ctg::dist::load(fs.string(), *a.dp, *a.opt);
  ctg::dist::load(fs.string(), *b.dp, *b.opt);
  CHECK(a.train(2) == b.train(2));
  b.opt->gather_whole_parameters();
  CHECK(all_values(a.store) == all_values(b.store));
}

TEST_CASE("fsdp: a parameter written while whole is caught by the next update, which changes nothing") {
  trainer sharded(2, ctg::dist::fsdp{});
  sharded.train(0);
  sharded.opt->gather_whole_parameters();
  sharded.store.param<Up>()[0] = ctg::bf16(1.5f);
  for (int v = 0; v < 2; ++v) run(sharded.step, sharded.store, 1, v);
  CHECK_THROWS_WITH_AS(sharded.opt->step(), doctest::Contains("was written after the optimizer last set it"), ctg::error);
}

TEST_CASE("fsdp: a layer's weight used as shard(quantize(w)) gathers as fp8 bytes, bit for bit the whole weight's cast") {
  // Every weight of the block (attention's four, the MLP's three) is gathered
  // as fp8; the norms' scales in bf16.
  std::size_t fp8_gathered = 0;
  for (std::size_t k = 0; k < fp8_step_t::wrt::size; ++k) fp8_gathered += fp8_dp_t::shards_type::layer_quantizer[k] != ctg::dist::detail::none;
  CHECK(fp8_gathered == 7);
  for (const bool reshard : {true, false}) {
    CAPTURE(reshard);
    trainer_of<fp8_step_t> whole(2, std::nullopt), sharded(2, ctg::dist::fsdp{.reshard_after_forward = reshard});
    for (int s = 0; s < 4; ++s) {
      CAPTURE(s);
      const auto a = whole.train(s), b = sharded.train(s);
      CHECK(std::bit_cast<std::uint32_t>(a.first) == std::bit_cast<std::uint32_t>(b.first));
      CHECK(std::bit_cast<std::uint32_t>(a.second) == std::bit_cast<std::uint32_t>(b.second));
    }
    whole.opt->gather_whole_parameters();
    sharded.opt->gather_whole_parameters();
    CHECK(all_values(whole.store) == all_values(sharded.store));  // (weights, FP8 scales and histories)
    // The gathered slices of an fp8 weight are its payload, 1 byte an
    // element; the norms' scales stay in their dtype (f32 under this policy).
    // By hand, per slot of a layer (one slot resharding, 3 keeping), each
    // leaf's slots rounded up to 64 bytes: scales 8 x 4 bytes (x2), wq..wo
    // 64 bytes (x4), w1..w2 96 bytes (x3).
    static_assert(std::is_same_v<ctg::tl::at_t<2, fp8_step_t::wrt>::dtype, ctg::f32>);  // (layers.{i}.ln1.scale)
    auto up64 = [](std::size_t n) { return (n + 63) / 64 * 64; };
    const std::size_t slots = reshard ? 1 : config::layers;
    CHECK(sharded.dp->gathered_bytes() == 2 * up64(slots * 32) + 4 * up64(slots * 64) + 3 * up64(slots * 96));
  }
}

TEST_CASE("fsdp: a store's evaluation step reads the stack's parameters only while they are whole") {
  using model = ctg::nn::transformer<config, ctg::precision::full<ctg::bf16>>;
  auto train = ctg::value_and_grad(model::loss(Ids{}, Pos{}, Tg{}));
  auto sample = ctg::forward(model::evaluation::logits(Ids{}, Pos{}));
  ctg::cpu::device dev{1};
  auto whole = ctg::make_store(dev, train, sample), sharded = ctg::make_store(dev, train, sample);
  for (auto* s : {&whole, &sharded}) ctg::nn::init_params(*s, 4, 0.3);
  using dp_type = ctg::dist::data_parallel<decltype(whole)>;
  dp_type dw(whole, ctg::dist::emulate{2}), ds(sharded, ctg::dist::emulate{2}, ctg::dist::fsdp{});
  ctg::dist::sharded_adamw ow(dw), os(ds);
  for (int v = 0; v < 2; ++v) {
    run(train, whole, 0, v);
    run(train, sharded, 0, v);
  }
  ow.step();
  os.step();
  const std::vector<i32> ids{1, 2, 3, 4, 5}, pos{0, 1, 2, 3, 4};
  auto logits = [&](auto& store) {
    sample(store, ctg::feed<Ids>(ids, 1, T), ctg::feed<Pos>(pos, T));
    const auto v = store.value(sample);
    return std::vector<float>(v.begin(), v.end());
  };
  CHECK_THROWS_WITH_AS(logits(sharded), doctest::Contains("is held in shards"), ctg::error);
  os.gather_whole_parameters();
  CHECK(logits(sharded) == logits(whole));
  // Training again takes them back into shards; the last value stays readable.
  for (int v = 0; v < 2; ++v) run(train, sharded, 1, v);
  CHECK(sharded.value(sample).size() == config::vocab * T);
  CHECK_THROWS_AS(logits(sharded), ctg::error);
}

namespace {
// A residual block over a frozen weight (as a fine-tuned model's base) and a trainable one.
template <ctg::fixed_string Prefix>
struct frozen_base_block {
  template <ctg::expr X>
  constexpr auto operator()(X x) const {
    using Base = ctg::frozen<Prefix + ".base", ctg::f32, 5, 5>;
    using Up = ctg::param<Prefix + ".up", ctg::f32, 5, 5>;
    return x + ctg::tanh(ctg::matmul(x, Base{})) * ctg::matmul(x, Up{});
  }
};
using FX = ctg::input<"x", ctg::f32, dyn, 5>;
using FBase = ctg::frozen<"layers.{i}.base", ctg::f32, 3, 5, 5>;
}  // namespace

TEST_CASE("fsdp: a stack's frozen leaves live in shards too, gathered with each layer, never reduced") {
  auto step = ctg::value_and_grad(ctg::sum(ctg::square(ctg::nn::stack<3, frozen_base_block>(FX{}))));
  using step_type = decltype(step);
  static_assert(!ctg::tl::contains<FBase, step_type::wrt>::value && ctg::tl::contains<FBase, step_type::nodes>::value);
  ctg::cpu::device dev{1};
  auto whole = ctg::make_store(dev, step), sharded = ctg::make_store(dev, step);
  for (auto* s : {&whole, &sharded}) {
    ctg::nn::init_params(*s, 6, 0.4);
    auto b = s->param<FBase>();
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(static_cast<int>(i % 7) - 3);
  }
  const std::size_t before = sharded.stored_bytes();
  using dp_type = ctg::dist::data_parallel<decltype(whole)>;
  dp_type dw(whole, ctg::dist::emulate{2}), ds(sharded, ctg::dist::emulate{2}, ctg::dist::fsdp{});
  // The frozen base (3 x 5 x 5 f32) left the store with the trainable stack
  // (3 x 5 x 5 f32), each rounded up to 64 bytes.
  CHECK(before - sharded.stored_bytes() == 2 * ((3 * 5 * 5 * 4 + 63) / 64 * 64));
  CHECK_THROWS_WITH_AS(sharded.param<FBase>(), doctest::Contains("is held in shards"), ctg::error);
  ctg::dist::sharded_adamw ow(dw, {.lr = 0.05f}), os(ds, {.lr = 0.05f});
  CHECK(ow.state_elements() == os.state_elements());  // (no state for the frozen base)
  std::vector<float> x(4 * 5);
  for (int s = 0; s < 3; ++s) {
    for (int v = 0; v < 2; ++v) {
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * static_cast<float>(i + 5 * v + 11 * s));
      step(whole, ctg::feed<FX>(x, 4));
      step(sharded, ctg::feed<FX>(x, 4));
    }
    CHECK(std::bit_cast<std::uint32_t>(dw.loss()) == std::bit_cast<std::uint32_t>(ds.loss()));
    CHECK(ow.step() == os.step());
  }
  os.gather_whole_parameters();
  CHECK(all_values(whole) == all_values(sharded));  // (the frozen base unchanged, gathered whole again)
}

TEST_CASE("fsdp: when the data_parallel ends, a store that held every shard has its parameters whole again") {
  trainer whole(2, std::nullopt), sharded(2, ctg::dist::fsdp{});
  for (int s = 0; s < 2; ++s) CHECK(whole.train(s) == sharded.train(s));
  sharded.opt.reset();
  sharded.dp.reset();  // (emulating: every shard is here)
  whole.opt->gather_whole_parameters();
  CHECK(all_values(whole.store) == all_values(sharded.store));
  run(sharded.step, sharded.store, 2, 0);  // alone again
}

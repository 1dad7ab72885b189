// Group profiling (exec/group_profile.hpp): a profiled store times every
// group of every successful run, a stack's block's groups once per layer,
// with the bytes each moved and a product's operations, and prints them
// (io::group_profile_text).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/io/graph_text.hpp>

#include "../common/nested_stacks.hpp"

namespace {
using ctg::dyn;
using ctg::f32;
using X = ctg::input<"x", f32, dyn, 8>;
using W = ctg::param<"w", f32, 8, 4>;
using Y = decltype(ctg::matmul(X{}, W{}));
using Step = decltype(ctg::value_and_grad(ctg::sum(ctg::tanh(Y{}))));
constexpr std::size_t product = ctg::tl::index_of<Y, Step::nodes>::value;

template <ctg::fixed_string Prefix>
struct mlp_block {
  template <ctg::expr In>
  constexpr auto operator()(In x) const {
    using P = ctg::precision::full<f32>;
    return x + ctg::nn::linear<Prefix + ".down", 4, P>(ctg::silu(ctg::nn::linear<Prefix + ".up", 8, P>(x)));
  }
};
using X4 = ctg::input<"x", f32, dyn, 4>;
template <ctg::nn::checkpointing C>
using Stacked = decltype(ctg::nn::stack<3, mlp_block, C>(X4{}));
template <ctg::nn::checkpointing C>
using SStep = decltype(ctg::value_and_grad(ctg::mean(ctg::square(Stacked<C>{}))));

const ctg::group_timing* find(std::span<const ctg::group_timing> times, std::size_t stack, std::size_t root) {
  for (const auto& t : times)
    if (t.stack == stack && t.root == root) return &t;
  return nullptr;
}
template <class... Parts>
std::string str_of(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("a profiled store times every group of each run, with its bytes and a product's operations") {
  constexpr const auto& d = ctg::description<Step>;
  const std::vector<float> xs(5 * 8, 0.25f);
  ctg::cpu::device dev{1};
  auto store = ctg::make_store(dev, Step{});
  Step step;
  step(store, ctg::feed<X>(xs, 5));
  CHECK(store.group_times().empty());  // off by default

  store.profile_groups(true);
  for (int run = 0; run < 3; ++run) step(store, ctg::feed<X>(xs, 5));
  const auto times = store.group_times();
  CHECK(times.size() == d.group_count());  // each group once, none twice
  double total = 0;
  for (const auto& g : d.group) {
    const ctg::group_timing* t = find(times, ctg::group_timing::own_step, g.root);
    CAPTURE(g.root);
    REQUIRE(t != nullptr);
    CHECK(t->calls == 3);
    CHECK(t->seconds >= 0.0);
    total += t->seconds;
  }
  CHECK(total > 0.0);
  // The forward product x [5, 8] @ w [8, 4]: reads 160 + 128 bytes, writes
  // 80; 2 * 5 * 4 * 8 operations. A fused group counts no operations.
  const ctg::group_timing* p = find(times, ctg::group_timing::own_step, product);
  REQUIRE(p != nullptr);
  CHECK(p->bytes == 3 * (160.0 + 128.0 + 80.0));
  CHECK(p->flops == 3 * 320.0);
  for (const auto& t : times)
    if (d.group[d.node[t.root].group].kind != ctg::group_kind::matmul) CHECK(t.flops == 0.0);

  // The text: a header, one line a group (the slowest first), the total,
  // and one line a kind of group (here: a product, a row loop, reductions).
  const std::string text = ctg::io::group_profile_text(store);
  std::size_t kinds = 0;
  for (std::size_t g = 0; g < d.group_count(); ++g) {
    bool first = true;
    for (std::size_t h = 0; h < g; ++h) first = first && ctg::detail::group_title(d.group[h]) != ctg::detail::group_title(d.group[g]);
    kinds += first;
    CHECK(count(text, "%  " + ctg::detail::group_title(d.group[g]) + "\n") == 1);
  }
  CHECK(count(text, "\n") == 1 + d.group_count() + 1 + kinds);
  CHECK(text.find(ctg::detail::node_line_text(d, product)) != std::string::npos);
  CHECK(text.find("ms in all; by kind:") != std::string::npos);

  // On again: new sums. Off: none.
  store.profile_groups(true);
  CHECK(store.group_times().empty());
  step(store, ctg::feed<X>(xs, 5));
  CHECK(find(store.group_times(), ctg::group_timing::own_step, product)->calls == 1);
  store.profile_groups(false);
  CHECK(store.group_times().empty());
}

TEST_CASE("a dropout mask is drawn in the loop, not read: a group's bytes are those of its loads") {
  // sum(dropout(tanh(x @ w))): the loss group reads the product [1000, 4]
  // f32 (16000 bytes) and writes the loss (4); the mask it draws is read
  // from nowhere (it was counted as 16000 bytes more).
  using D = decltype(ctg::dropout<"drop">(ctg::tanh(Y{}), ctg::lit<0.25>));
  using DStep = decltype(ctg::value_and_grad(ctg::sum(D{})));
  constexpr const auto& d = ctg::description<DStep>;
  const std::vector<float> xs(1000 * 8, 0.25f);
  ctg::cpu::device dev{1};
  auto store = ctg::make_store(dev, DStep{});
  store.profile_groups(true);
  DStep step;
  step(store, ctg::feed<X>(xs, 1000));
  constexpr std::size_t loss = ctg::tl::index_of<typename DStep::root, DStep::nodes>::value;
  REQUIRE(d.node[loss].op == "sum");
  const ctg::group_timing* t = find(store.group_times(), ctg::group_timing::own_step, loss);
  REQUIRE(t != nullptr);
  CHECK(t->bytes == 16000.0 + 4.0);
}

TEST_CASE("a failed run adds nothing to the profile") {
  ctg::cpu::device dev{1};
  auto store = ctg::make_store(dev, Step{});
  Step step;
  store.check_finite(true);
  store.profile_groups(true);
  const std::vector<float> xs(2 * 8, 0.5f);
  step(store, ctg::feed<X>(xs, 2));
  std::vector<float> bad = xs;
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(step(store, ctg::feed<X>(bad, 2)), ctg::error);
  for (const auto& t : store.group_times()) CHECK(t.calls == 1);
  // The next run's sums start from the last successful run's.
  step(store, ctg::feed<X>(xs, 2));
  for (const auto& t : store.group_times()) CHECK(t.calls == 2);
}

TEST_CASE("a stack's block's groups are timed once per layer, under their stack; recomputed, what backward reads twice") {
  using C = ctg::nn::checkpointing;
  auto check = [](auto step, std::size_t forward_calls_per_layer) {
    using S = decltype(step);
    constexpr const auto& d = ctg::description<S>;
    REQUIRE(d.blocks.size() == 1);
    const ctg::step_description& block = *d.blocks[0].step;
    const std::size_t stack = d.blocks[0].stack;
    ctg::cpu::device dev{1};
    auto store = ctg::make_store(dev, step);
    ctg::nn::init_params(store, 3, 0.5);
    store.profile_groups(true);
    const std::vector<float> xs(6 * 4, 0.3f);
    for (int run = 0; run < 2; ++run) step(store, ctg::feed<X4>(xs, 6));
    const auto times = store.group_times();
    std::size_t own = 0;
    for (const auto& t : times) own += t.stack == ctg::group_timing::own_step;
    CHECK(own + block.group_count() == times.size());
    // Recomputed, a layer's forward part runs again for what its backward
    // reads: not the layer's output x + down(h), nor down's product, which
    // only the output reads.
    const std::size_t out = block.forward_end - 1, down = block.child(out, 1);
    REQUIRE(block.node[out].op == "add");
    REQUIRE(block.node[down].op == "matmul");
    for (const auto& g : block.group) {
      const ctg::group_timing* t = find(times, stack, g.root);
      CAPTURE(g.root);
      REQUIRE(t != nullptr);
      const bool runs_again = !g.backward && g.root != out && g.root != down;
      CHECK(t->calls == 2 * 3 * (runs_again ? forward_calls_per_layer : 1));
    }
    const std::string text = ctg::io::group_profile_text(store);
    CHECK(count(text, "(block of #" + std::to_string(stack) + ")") == block.group_count());
  };
  check(SStep<C::none>{}, 1);
  check(SStep<C::every_layer>{}, 2);  // each layer's forward part runs again in backward (what it reads)
}

TEST_CASE("a stack inside a stacked block: its block's groups are timed under both stacks, and printed") {
  // The outer stack is node #2 of the step and the inner one node #2 of the
  // outer block: the inner block's groups were filed under stack #2 alone,
  // described with the outer block's nodes, and the text read past them.
  using C = ctg::nn::checkpointing;
  using namespace nested_stacks;
  auto step = ctg::value_and_grad(
      ctg::sum(ctg::nn::stack<2, nested_blocks<C::none, 0.0>::template outer, C::none>(NX{}) * ctg::lit<0.5>));
  using S = decltype(step);
  constexpr const auto& d = ctg::description<S>;
  REQUIRE(d.blocks.size() == 1);
  const ctg::step_description& outer = *d.blocks[0].step;
  REQUIRE(outer.blocks.size() == 1);
  const ctg::step_description& inner = *outer.blocks[0].step;
  const std::size_t top = d.blocks[0].stack, in_outer = outer.blocks[0].stack;
  REQUIRE(top == in_outer);  // (the collision this checks)
  ctg::cpu::device dev{1};
  auto store = ctg::make_store(dev, step);
  ctg::nn::init_params(store, 7, 0.5);
  const std::vector<float> x(12, 0.3f);
  store.profile_groups(true);
  step(store, ctg::feed(NX{}, x, 3));
  const auto times = store.group_times();
  std::size_t in_inner = 0, in_top = 0, in_outer_block = 0;
  for (const auto& t : times) {
    if (t.block.depth() == 2) {
      CHECK(t.block.stack[0] == top);
      CHECK(t.block.stack[1] == in_outer);
      CHECK(t.root < inner.size());
      CHECK(t.calls == 2 * 2);  // 2 outer layers of 2 inner ones
      ++in_inner;
    } else if (t.block.depth() == 1) {
      CHECK(t.root < outer.size());
      ++in_outer_block;
    } else {
      ++in_top;
    }
  }
  // Every group of every level once (the stacks' own nodes are not timed).
  auto timed = [](const ctg::step_description& s) {
    std::size_t n = 0;
    for (const auto& g : s.group) n += s.node[g.root].op != "stack" && s.node[g.root].op != "stack_grad";
    return n;
  };
  CHECK(in_inner == timed(inner));
  CHECK(in_outer_block == timed(outer));
  CHECK(in_top == timed(d));
  const std::string text = ctg::io::group_profile_text(store);
  CHECK(count(text, str_of(" (block of #", in_outer, " in the block of #", top, ")")) == in_inner);
}

TEST_CASE("a profiled fused attention counts every operand, its three gradients and the products its kernels compute") {
  // Two heads of 8 tokens of 4 features, f32 (256 bytes a head tensor, 64 a
  // per-token stat); each product over the causal half: 2 heads x 36 pairs x
  // 4 features x 2 = 576 operations.
  using Q = ctg::param<"q", f32, 2, 8, 4>;
  using K = ctg::param<"k", f32, 2, 8, 4>;
  using V = ctg::param<"v", f32, 2, 8, 4>;
  using R = ctg::frozen<"r", f32, 2, 8, 4>;
  auto step = ctg::value_and_grad(ctg::sum(ctg::causal_attention(Q{}, K{}, V{}) * R{}), ctg::wrt<Q, K, V>);
  using S = decltype(step);
  constexpr const auto& d = ctg::description<S>;
  auto store = ctg::make_store(ctg::cpu::device{1}, step);
  ctg::nn::init_params(store, 1);
  store.profile_groups(true);
  step(store);
  int seen = 0;
  for (const auto& t : store.group_times()) {
    if (d.group[d.node[t.root].group].kind != ctg::group_kind::attention) continue;
    const std::string op(d.node[t.root].op);
    CAPTURE(op);
    ++seen;
    if (op == "attention_lse") CHECK((t.bytes == 256 * 2 + 64 && t.flops == 576));             // q, k; lse
    else if (op == "causal_attention") CHECK((t.bytes == 256 * 4 + 64 && t.flops == 2 * 576));  // q, k, v, lse; o
    else CHECK((op == "attention_grad" && t.bytes == 256 * 4 + 64 * 2 + 3 * 256 && t.flops == 7 * 576));
  }
  CHECK(seen == 3);
}

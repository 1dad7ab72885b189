// A step's description (lower/describe.hpp) and its renderings: the group
// summary (io/graph_text.hpp) and the DOT graph (io/dot.hpp). Node labels
// must say what the node types say; groups, regions, kept and recomputed
// values what the schedule and the program decided.
#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include <ctg/ctg.hpp>
#include <ctg/io/dot.hpp>

namespace {
using ctg::dyn;

// The parts one after the other, numbers in decimal.
template <class... Parts>
std::string str(const Parts&... parts) {
  std::string s;
  auto add = [&](const auto& part) {
    if constexpr (std::is_arithmetic_v<std::remove_cvref_t<decltype(part)>>) s += std::to_string(part);
    else s += part;
  };
  (add(parts), ...);
  return s;
}

std::size_t count(const std::string& text, std::string_view what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The DOT statement of node id (its line, from the id on), or "" when there is none.
std::string dot_line(const std::string& dot, const std::string& id) {
  const std::size_t at = dot.find(str(" ", id, " [label="));
  if (at == std::string::npos) return "";
  return dot.substr(at + 1, dot.find('\n', at) - at - 1);
}

// ---------------------------------------------------------------- a model ----
// x (bf16 input) times w (f32 param, cast to bf16), plus x times e (frozen),
// then in f32 plus a bias that broadcasts over rows.
using X = ctg::input<"x", ctg::bf16, dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 8>;
using E = ctg::frozen<"e", ctg::bf16, 16, 8>;
using B = ctg::param<"b", ctg::f32, 8>;
using Wb = decltype(ctg::cast<ctg::bf16>(W{}));
using H = decltype(ctg::matmul(X{}, Wb{}));
using F = decltype(ctg::matmul(X{}, E{}));
using Y = decltype(ctg::cast<ctg::f32>(H{} + F{}) + B{});
using Loss = decltype(ctg::mean(ctg::square(Y{})));
using Step = decltype(ctg::value_and_grad(Loss{}));
template <class N>
constexpr std::size_t at = ctg::tl::index_of<N, Step::nodes>::value;
constexpr const ctg::step_description& d = ctg::description<Step>;

constexpr bool same_dims(const ctg::shape_value& a, std::initializer_list<ctg::dim_t> b) {
  if (a.rank != b.size()) return false;
  std::size_t i = 0;
  for (ctg::dim_t x : b)
    if (a.d[i++] != x) return false;
  return true;
}

// ------------------------------------------------------- a checkpointed one ----
using X2 = ctg::input<"x", ctg::f32, dyn, 16>;
using W1 = ctg::param<"w1", ctg::f32, 16, 32>;
using W2 = ctg::param<"w2", ctg::f32, 32, 16>;
using M1 = decltype(ctg::matmul(X2{}, W1{}));
using Silu = decltype(ctg::silu(M1{}));
using Checkpointed = decltype(ctg::checkpoint(Silu{}));
template <class Inner>  // Silu, or Checkpointed
using CStep = decltype(ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(Inner{}, W2{})))));

// ------------------------------------------------------------- a stack ----
template <ctg::fixed_string Prefix>
struct mlp_block {
  template <ctg::expr In>
  constexpr auto operator()(In x) const {
    using P = ctg::precision::full<ctg::f32>;
    return x + ctg::nn::linear<Prefix + ".down", 4, P>(ctg::silu(ctg::nn::linear<Prefix + ".up", 8, P>(x)));
  }
};
using X3 = ctg::input<"x", ctg::f32, dyn, 4>;
template <ctg::nn::checkpointing C>
using Stacked = decltype(ctg::nn::stack<2, mlp_block, C>(X3{}));
template <ctg::nn::checkpointing C>
using SStep = decltype(ctg::value_and_grad(ctg::mean(ctg::square(Stacked<C>{}))));
// -------------------------------------- fp8, dropout, an embedding, a view ----
using Ids = ctg::input<"ids", ctg::i32, dyn>;
using Tab = ctg::param<"tab", ctg::f32, 10, 8>;
using D3 = ctg::precision::delayed<3>;
using SX = ctg::scaling::delayed<"lin.x", D3>;
using SW = ctg::scaling::delayed<"lin.w", D3>;
using SG = ctg::scaling::delayed<"lin.g", D3>;
using W8 = ctg::param<"w8", ctg::f32, 8, 4>;
using Dropped = decltype(ctg::dropout<"drop">(ctg::gather(Tab{}, Ids{}), ctg::lit<0.25>));
using Q = decltype(ctg::quantize<ctg::e4m3, SX>(Dropped{}));
using Lin = decltype(ctg::fp8_matmul<ctg::f32, SG>(Q{}, ctg::quantize<ctg::e4m3, SW>(W8{})));
using KStep = decltype(ctg::value_and_grad(ctg::mean(ctg::square(ctg::unsqueeze<0>(Lin{}))) +
                                           ctg::mean(ctg::dequantize<ctg::f32>(Q{}))));
}  // namespace

TEST_CASE("every node's op, name, dtype, static dims and grad requirement come from its type") {
  static_assert(d.size() == Step::nodes::size);
  static_assert(d.node[at<W>].op == "param" && d.node[at<W>].name == "w" && d.node[at<W>].dtype == "f32");
  static_assert(same_dims(d.node[at<W>].dims, {16, 8}) && d.node[at<W>].requires_grad);
  static_assert(d.node[at<E>].op == "frozen" && d.node[at<E>].dtype == "bf16" && !d.node[at<E>].requires_grad);
  static_assert(d.node[at<X>].op == "input" && same_dims(d.node[at<X>].dims, {dyn, 16}));
  static_assert(d.node[at<X>].role == ctg::leaf_role::input && d.node[at<B>].role == ctg::leaf_role::param);
  static_assert(d.node[at<Wb>].op == "cast" && d.node[at<Wb>].dtype == "bf16" && d.node[at<Wb>].requires_grad);
  static_assert(d.node[at<H>].op == "matmul" && d.node[at<H>].dtype == "bf16" && d.node[at<H>].requires_grad);
  static_assert(same_dims(d.node[at<H>].dims, {dyn, 8}));
  static_assert(d.node[at<F>].op == "matmul" && !d.node[at<F>].requires_grad);  // frozen x input: no grad
  static_assert(d.node[at<Y>].op == "add" && d.node[at<Y>].dtype == "f32");
  static_assert(d.node[at<Loss>].op == "mean" && same_dims(d.node[at<Loss>].dims, {}));
  // Every element functor has a name to show.
  static_assert([]<class... Ops>(ctg::op::functor_list<Ops...>) {
    return ((std::string_view(Ops::name).size() > 0) && ...);
  }(ctg::op::all_functors{}));
}

TEST_CASE("the loss is the forward part's output; the gradients are the backward part's") {
  static_assert(d.forward_end == at<Loss> + 1);
  static_assert(d.node[at<Loss>].output && !d.node[at<Loss>].backward);
  static_assert(!d.node[at<H>].backward && !d.node[at<W>].backward);
  constexpr std::size_t gw = at<ctg::tl::at_t<Step::grad_output<W>, Step::outputs>>;
  static_assert(d.node[gw].output && d.node[gw].backward && d.node[gw].dtype == "f32");
  static_assert(same_dims(d.node[gw].dims, {16, 8}));
  const std::string dot = ctg::io::to_dot(Step{});
  // The gradient's statement comes after the backward cluster opens, the loss's before.
  const std::size_t bw = dot.find("subgraph cluster_backward {");
  REQUIRE(bw != std::string::npos);
  CHECK(dot.find(str(" n", gw, " [label=")) > bw);
  CHECK(dot.find(str(" n", at<Loss>, " [label=")) < bw);
  CHECK(dot_line(dot, str("n", gw)).find("output") != std::string::npos);
}

TEST_CASE("groups are the schedule's: one DOT cluster each, with its kind and loop shape") {
  static_assert(d.group_count() == ctg::group_count_v<Step>);
  std::size_t grouped = 0, in_groups = 0;
  for (std::size_t g = 0; g < d.group_count(); ++g) {
    CHECK(d.group[g].kind == ctg::schedule<Step>::group_kinds[g]);
    CHECK(d.node[d.group[g].root].group == g);
    in_groups += d.group[g].nodes;
  }
  for (std::size_t i = 0; i < d.size(); ++i) grouped += d.node[i].group != ctg::no_index;
  CHECK(grouped == in_groups);
  // y (a cast and two adds), read by the loss and by backward, has no group
  // and no buffer: each group that reads it computes it again.
  static_assert(d.node[at<Y>].duplicated && d.node[at<Y>].group == ctg::no_index && !d.node[at<Y>].buffer);
  // So the bias it adds, broadcast over rows, makes backward's first
  // elementwise group (the square's gradient, which reads y) run by rows
  // (group.hpp's decision).
  constexpr std::size_t first_backward = [] {
    std::size_t g = 0;
    while (!(d.group[g].backward && d.group[g].kind == ctg::group_kind::elementwise)) ++g;
    return g;
  }();
  constexpr auto& gy = d.group[first_backward];
  static_assert(gy.loop == ctg::loop_kind::rows);
  static_assert(gy.loop == ctg::detail::group_info<Step, gy.root>::loop);
  static_assert(d.node[at<W>].group == ctg::no_index);  // leaves are computed by no group

  const std::string dot = ctg::io::to_dot(Step{});
  CHECK(count(dot, "subgraph cluster_g") == ctg::group_count_v<Step>);
  CHECK(count(dot, "subgraph cluster_region_") == 0);
  CHECK(count(dot, "subgraph cluster_forward {") == 1);
  CHECK(count(dot, "subgraph cluster_backward {") == 1);
  const std::string label = str("label=\"g", first_backward, " elementwise, rows\"");
  CHECK(dot.find(label) != std::string::npos);
  // y is drawn outside every group, saying so.
  CHECK(dot_line(dot, str("n", at<Y>)).find("computed in each group reading it") != std::string::npos);
}

TEST_CASE("the DOT graph names every node once, with its op, type and grad, and leaves by role") {
  const std::string dot = ctg::io::to_dot(Step{});
  for (std::size_t i = 0; i < d.size(); ++i) {
    const std::string id = str("n", i);
    CAPTURE(id);
    CHECK(count(dot, str(" ", id, " [label=")) == 1);
    CHECK(dot_line(dot, id).find(str("#", i, " ", d.node[i].op)) != std::string::npos);
  }
  CHECK(dot_line(dot, str("n", at<H>)).find("matmul\\nbf16 [dyn, 8], grad") != std::string::npos);
  CHECK(dot_line(dot, str("n", at<F>)).find("matmul\\nbf16 [dyn, 8], no grad") != std::string::npos);
  CHECK(dot_line(dot, str("n", at<W>)).find("param w\\nf32 [16, 8], grad") != std::string::npos);
  CHECK(dot_line(dot, str("n", at<E>)).find("frozen e\\nbf16 [16, 8], no grad") != std::string::npos);
  CHECK(dot_line(dot, str("n", at<W>)).find("fillcolor=\"#c7e9c0\"") != std::string::npos);
  CHECK(dot_line(dot, str("n", at<E>)).find("fillcolor=\"#d9d9d9\"") != std::string::npos);
  CHECK(dot_line(dot, str("n", at<X>)).find("fillcolor=\"#c6dbef\"") != std::string::npos);
  // Every edge joins two declared nodes: one per child.
  std::size_t edges = 0;
  for (std::size_t i = 0; i < d.size(); ++i) edges += d.child_count(i);
  CHECK(count(dot, " -> ") == edges);
  using HF = decltype(H{} + F{});
  CHECK(count(dot, str(" n", at<H>, " -> n", at<HF>, ";\n")) == 1);
}

TEST_CASE("a checkpoint region: its values are recomputed in backward, not kept, and drawn as a cluster") {
  using Plain = CStep<Silu>;
  using Ckpt = CStep<Checkpointed>;
  constexpr const ctg::step_description& p = ctg::description<Plain>;
  constexpr const ctg::step_description& c = ctg::description<Ckpt>;
  constexpr std::size_t m = ctg::tl::index_of<M1, Ckpt::nodes>::value;
  constexpr std::size_t cp = ctg::tl::index_of<Checkpointed, Ckpt::nodes>::value;
  // The matmul inside the region is recomputed and not kept; without the checkpoint it is kept.
  static_assert(c.node[m].region == cp && c.node[m].recomputed && !c.node[m].kept);
  static_assert(c.node[cp].checkpoint && c.node[cp].kept && !c.node[cp].recomputed);
  static_assert(c.group[c.node[m].group].recomputed && c.group[c.node[m].group].region == cp);
  constexpr std::size_t pm = ctg::tl::index_of<M1, Plain::nodes>::value;
  static_assert(p.node[pm].kept && !p.node[pm].recomputed && p.node[pm].region == ctg::no_index);
  // As many groups recomputed as the program runs again.
  constexpr auto& prog = ctg::program<Ckpt>::table;
  std::size_t again = 0, marked = 0;
  for (std::size_t q = 0; q < prog.len; ++q) again += prog.recompute[q];
  for (std::size_t g = 0; g < c.group_count(); ++g) marked += c.group[g].recomputed;
  CHECK(again == marked);
  CHECK(marked > 0);
  for (std::size_t i = 0; i < p.size(); ++i) CHECK_FALSE(p.node[i].recomputed);

  const std::string dot = ctg::io::to_dot(Ckpt{});
  CHECK(count(dot, str("subgraph cluster_region_", cp, " {")) == 1);
  CHECK(count(dot, "subgraph cluster_g") == ctg::group_count_v<Ckpt>);
  const std::string mline = dot_line(dot, str("n", m));
  CHECK(mline.find("recomputed in backward") != std::string::npos);
  CHECK(mline.find("dashed") != std::string::npos);
  CHECK(dot_line(dot, str("n", cp)).find("kept for backward") != std::string::npos);
  // The matmul's group cluster sits inside the region's cluster.
  const std::size_t region = dot.find("subgraph cluster_region_"), group = dot.find(mline);
  CHECK(region < group);
  CHECK(dot.find(str("subgraph cluster_g", c.node[m].group, " {"), region) < group);
  const std::string plain = ctg::io::to_dot(Plain{});
  CHECK(count(plain, "recomputed") == 0);
  CHECK(count(plain, "cluster_region_") == 0);
  CHECK(dot_line(plain, str("n", pm)).find("kept for backward") != std::string::npos);

  const std::string summary = ctg::io::group_summary(Ckpt{});
  CHECK(count(summary, "\n") == c.group_count());
  CHECK(count(summary, str("recomputed in backward (region of #", cp, ")")) == marked);
}

TEST_CASE("a stack's block is described as its own step, drawn inside the stack's part and linked to it") {
  using C = ctg::nn::checkpointing;
  using S = SStep<C::every_layer>;
  using Block = typename Stacked<C::every_layer>::backward_step;
  constexpr std::size_t r = ctg::tl::index_of<Stacked<C::every_layer>, S::nodes>::value;
  constexpr const ctg::step_description& d = ctg::description<S>;
  constexpr const ctg::step_description& b = ctg::description<Block>;
  static_assert(d.node[r].op == "stack" && d.node[r].layers == 2 && d.node[r].recomputes_layers);
  static_assert(d.blocks.size() == 1 && d.blocks[0].stack == r && d.blocks[0].step == &ctg::description<Block>);

  // The block's root, the vjp loss sum(out * g), is there for autodiff to
  // derive the gradients from: no group computes it, nor its product.
  constexpr std::size_t loss = ctg::tl::index_of<typename Block::root, typename Block::nodes>::value;
  static_assert(b.node[loss].op == "sum" && b.node[loss].group == ctg::no_index && !b.node[loss].output &&
                !b.node[loss].buffer);
  static_assert(b.node[b.child(loss, 0)].op == "mul" && b.node[b.child(loss, 0)].group == ctg::no_index);
  // Nor does a layer keep its output for backward, which does not read it
  // (the runner copies it into the stack's buffer as the forward part ends).
  constexpr const ctg::step_description& kept_block = ctg::description<typename Stacked<C::none>::backward_step>;
  static_assert(kept_block.node[kept_block.forward_end - 1].op == "add" &&
                !kept_block.node[kept_block.forward_end - 1].kept);

  const std::string dot = ctg::io::to_dot(S{});
  const std::string block = str("s", r, "_");
  CHECK(count(dot, str("subgraph cluster_", block, "block {")) == 1);
  CHECK(count(dot, "subgraph cluster_g") == ctg::group_count_v<S>);
  CHECK(count(dot, str("subgraph cluster_", block, "g")) == ctg::group_count_v<Block>);
  for (std::size_t i = 0; i < b.size(); ++i) {
    CAPTURE(i);
    CHECK(count(dot, str(" ", block, "n", i, " [label=\"#", i, " ", b.node[i].op)) == 1);
  }
  // The stack's input feeds the block's carry; the block's output comes back to the stack.
  std::size_t carry = b.size();
  for (std::size_t i = 0; i < b.size(); ++i)
    if (b.node[i].role == ctg::leaf_role::carry && b.node[i].kind == ctg::node_kind::leaf) carry = i;
  REQUIRE(carry < b.size());
  CHECK(count(dot, str(" n", d.child(r, 0), " -> ", block, "n", carry, " [style=dashed]")) == 1);
  CHECK(count(dot, str(" ", block, "n", b.forward_end - 1, " -> n", r, " [style=dashed")) == 1);
  // The block's cluster is inside the forward part's.
  CHECK(dot.find("subgraph cluster_forward {") < dot.find(str("subgraph cluster_", block, "block {")));
  CHECK(dot.find(str("subgraph cluster_", block, "block {")) < dot.find("subgraph cluster_backward {"));

  const std::string summary = ctg::io::group_summary(S{});
  CHECK(count(summary, "\n") == d.group_count() + 1 + b.group_count());
  CHECK(summary.find(str("block of #", r, " (stack x2): runs once per layer; ",
                         "each layer's forward part runs again in backward:")) != std::string::npos);
  const std::string kept = ctg::io::group_summary(SStep<C::none>{});
  CHECK(kept.find("(stack x2): runs once per layer; every layer's values kept:") != std::string::npos);
  // A forward step keeps one layer's values at a time (exec/stack_runner.hpp).
  const std::string forward = ctg::io::group_summary(decltype(ctg::forward(Stacked<C::none>{})){});
  CHECK(forward.find("(stack x2): runs once per layer; one layer's values at a time (no backward):") !=
        std::string::npos);
  // ... and only its block's forward part runs: no backward group listed or
  // drawn, nothing drawn kept for a backward.
  CHECK(forward.find(" backward  ") == std::string::npos);
  CHECK(count(forward, "\n") == 1 + b.group_count() - [&] {
          std::size_t n = 0;
          for (const auto& g : b.group) n += g.backward;
          return n;
        }() + 1);
  const std::string forward_dot = ctg::io::to_dot(decltype(ctg::forward(Stacked<C::none>{})){});
  CHECK(forward_dot.find("kept for backward") == std::string::npos);
  CHECK(count(forward_dot, "_backward {") == 1);  // (the step's own part, empty; none in the block)
}

TEST_CASE("the group summary: one line per group, in order, with its fused ops, then the duplicated nodes") {
  const std::string summary = ctg::io::group_summary(Step{});
  CHECK(count(summary, "\n") == d.group_count() + 1);
  std::size_t from = 0;
  for (std::size_t g = 0; g < d.group_count(); ++g) {
    const std::string head = str("g", g, " ");
    CAPTURE(head);
    const std::size_t line = summary.find(head, from);
    REQUIRE(line == from);  // each line starts with its group, in execution order
    const std::size_t end = summary.find('\n', line);
    const std::string text = summary.substr(line, end - line);
    CHECK(text.find(d.group[g].backward ? "backward" : "forward") != std::string::npos);
    CHECK(text.find(str("#", d.group[g].root, " ", d.node[d.group[g].root].op)) !=
          std::string::npos);
    from = end + 1;
  }
  // The last line: the nodes each group reading them computes again, y among them.
  const std::size_t last = summary.find("computed again in each group that reads it: ", from);
  REQUIRE(last == from);
  CHECK(summary.find(str("#", at<Y>, " add f32 [dyn, 8]"), last) != std::string::npos);
}

TEST_CASE("names are escaped in DOT labels") {
  using Q = ctg::param<"q\"u\\o", ctg::f32, 2>;
  const std::string dot = ctg::io::to_dot(ctg::value_and_grad(ctg::sum(ctg::square(Q{}))));
  CHECK(dot.find("#0 param q\\\"u\\\\o\\nf32 [2], grad") != std::string::npos);
}

TEST_CASE("every kind of node has an op name: fp8, dropout, gather and its gradient, views, stacks, state leaves") {
  constexpr const ctg::step_description& k = ctg::description<KStep>;
  using K = ctg::node_kind;
  bool seen[static_cast<std::size_t>(K::failed) + 1]{};
  auto look = [&](const ctg::step_description& desc) {
    for (std::size_t i = 0; i < desc.size(); ++i) {
      CAPTURE(i);
      CHECK_FALSE(desc.node[i].op.empty());
      seen[static_cast<std::size_t>(desc.node[i].kind)] = true;
    }
  };
  look(k);
  look(d);
  look(ctg::description<SStep<ctg::nn::checkpointing::every_layer>>);
  look(ctg::description<decltype(ctg::forward(ctg::transpose(W1{})))>);  // (products read theirs in place)
  {  // fused attention: its three nodes and the views of its gradients
    using At = ctg::param<"at", ctg::f32, 2, 3, 4>;
    using AStep = decltype(ctg::value_and_grad(ctg::sum(ctg::causal_attention(At{}, At{}, At{}))));
    constexpr const ctg::step_description& a = ctg::description<AStep>;
    look(a);
    std::string ops;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a.node[i].op.starts_with("attention") || a.node[i].op == "causal_attention") ops += str(a.node[i].op, " ");
    CHECK(ops == "attention_lse causal_attention attention_grad attention_dq attention_dk attention_dv ");
  }
  for (std::size_t kind = 0; kind < static_cast<std::size_t>(K::failed); ++kind) {
    CAPTURE(kind);
    CHECK(seen[kind]);  // every kind but failed (no step holds one) was looked at
  }
  constexpr std::size_t q = ctg::tl::index_of<Q, KStep::nodes>::value, lin = ctg::tl::index_of<Lin, KStep::nodes>::value;
  static_assert(k.node[q].op == "quantize" && k.node[q].dtype == "e4m3" && k.node[q].requires_grad);
  static_assert(k.node[lin].op == "fp8_matmul" && k.node[lin].dtype == "f32");
  constexpr std::size_t mask = ctg::tl::index_of<ctg::tl::at_t<1, Dropped::children>, KStep::nodes>::value;
  static_assert(k.node[mask].op == "dropout_mask" && k.node[mask].name == "drop" && k.node[mask].value == 0.25);
  constexpr std::size_t scale = ctg::tl::index_of<SX::scale_leaf, KStep::nodes>::value;
  static_assert(k.node[scale].op == "state" && k.node[scale].name == "lin.x.scale" && !k.node[scale].requires_grad);

  const std::string dot = ctg::io::to_dot(KStep{});
  CHECK(dot_line(dot, str("n", mask)).find(str("#", mask, " dropout_mask drop p=0.25")) !=
        std::string::npos);
  CHECK(dot_line(dot, str("n", scale)).find("state lin.x.scale\\nf32 [1], no grad") != std::string::npos);
  CHECK(dot_line(dot, str("n", scale)).find("fillcolor=\"#fdd0a2\"") != std::string::npos);
  CHECK(count(dot, "subgraph cluster_g") == ctg::group_count_v<KStep>);
}

TEST_CASE("a product names the operands it reads transposed") {
  using A = ctg::param<"a", ctg::f32, 16, 3>;
  using Bt = ctg::param<"b", ctg::f32, 5, 16>;
  using Prod = decltype(ctg::matmul(ctg::transpose(A{}), ctg::transpose(Bt{})));  // [3, 16] [16, 5]
  using PStep = decltype(ctg::value_and_grad(ctg::sum(Prod{})));
  constexpr const ctg::step_description& p = ctg::description<PStep>;
  constexpr std::size_t prod = ctg::tl::index_of<Prod, PStep::nodes>::value;
  static_assert(p.node[prod].op == "matmul a^T b^T" && same_dims(p.node[prod].dims, {3, 5}));
  // No transpose node anywhere, forward or backward: every transposed read is a flag.
  static_assert([] {
    for (std::size_t i = 0; i < p.size(); ++i)
      if (p.node[i].op == "transpose") return false;
    return true;
  }());
  CHECK(ctg::io::group_summary(PStep{}).find("matmul a^T b^T f32 [3, 5]") != std::string::npos);
}

// A value and its cast, each read by another group: the cast is a side
// output of the value's group (lower/schedule.hpp), a node of that group with
// a buffer of its own, named on its summary line.
TEST_CASE("a side output: in its writer's group, named on the group's summary line") {
  using Xs = ctg::input<"x", ctg::f32, dyn, 16>;
  using Ws = ctg::param<"w", ctg::bf16, 16, 8>;
  using Ev = decltype(ctg::exp(Xs{} * ctg::lit<0.5>));
  using Cb = decltype(ctg::cast<ctg::bf16>(Ev{}));
  using Ss = decltype(ctg::value_and_grad(ctg::mean(ctg::square(ctg::cast<ctg::f32>(ctg::matmul(Cb{}, Ws{})))) +
                                          ctg::mean(Ev{})));
  constexpr const auto& ds = ctg::description<Ss>;
  constexpr std::size_t ev = ctg::tl::index_of<Ev, Ss::nodes>::value, cb = ctg::tl::index_of<Cb, Ss::nodes>::value;
  const std::size_t g = ds.node[ev].group;
  CHECK(ds.group[g].root == ev);
  CHECK(ds.group[g].side == cb);
  CHECK(ds.node[cb].group == g);
  CHECK(ds.node[cb].buffer);
  const std::string summary = ctg::io::group_summary(Ss{});
  CHECK(count(summary, "\n") == ds.group_count() + 1);  // (no line of its own)
  CHECK(count(summary, str("; also writes #", cb, " cast")) == 1);
}

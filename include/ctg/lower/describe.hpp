#pragma once
// A step's graph as data for people to read: every node with its op, dtype,
// static dims and whether it requires grad, and what the lowering decided
// for it: its fusion group and that group's loop shape, the forward or
// backward part, its checkpoint region, whether its value is kept for
// backward or computed again there. Everything is read off the tables the
// backends run (schedule.hpp, program.hpp, group.hpp), so a drawing shows
// their decisions, not a second opinion. As text and as a picture:
// io/graph_text.hpp (a line per group), io/dot.hpp (Graphviz).
//
//   constexpr const ctg::step_description& d = ctg::description<decltype(step)>;
//   d.node[i].op      "matmul", "mul", "sum", a leaf's role ("param"), ...
//   d.node[i].dtype   "bf16";  d.node[i].dims (ctg::dyn where known at run time)
//   d.node[i].group   index into d.group (execution order), or ctg::no_index
//   d.node[i].duplicated  computed again in each group that reads it (then no group)
//   d.group[g].kind, .loop, .backward, .recomputed, .region
//   d.blocks          each ctg::nn::stack node and its block's description
//
// A step_description has no sizes in its type (spans over tables made once
// per step), so the code that reads one is one function for every step.
#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <utility>

#include <ctg/lower/group.hpp>
#include <ctg/lower/program.hpp>

namespace ctg {

// No group (a leaf, a constant, a view: computed by none) or no region.
inline constexpr std::size_t no_index = static_cast<std::size_t>(-1);
static_assert(no_index == detail::no_group && no_index == detail::no_region);  // as the tables say it

struct node_description {
  node_kind kind{};
  std::string_view op;     // "matmul", "mul", "sum", "cast", a leaf's role ("param", "input", ...)
  std::string_view name;   // a leaf's or a dropout mask's name; else empty
  std::string_view dtype;  // "f32", "bf16", "e4m3", "i32", ...
  shape_value dims{};      // static dims, ctg::dyn where known only at run time
  bool requires_grad = false;
  leaf_role role{};        // (leaves)
  double value = 0.0;      // a constant's value, a dropout mask's probability
  std::size_t layers = 0;  // a stack's layers
  // A stack that runs each layer's forward part again in backward (checkpointing::every_layer).
  bool recomputes_layers = false;
  // What the lowering decided:
  bool output = false;              // an output of the step (the loss, a gradient)
  bool backward = false;            // in the backward part (the forward part: the loss and what it reads)
  std::size_t group = no_index;     // the group that computes it (its root, or fused into it)
  std::size_t region = no_index;    // the checkpoint node whose region holds it
  bool checkpoint = false;          // ends a checkpoint region (ctg::checkpoint)
  bool buffer = false;              // has a buffer of its own (else: a leaf, a view, or fused into its readers' loop)
  bool duplicated = false;          // in no group: computed again inside each group that reads it (a cheap node)
  bool kept = false;                // a forward buffer still alive when backward starts
  bool recomputed = false;          // computed again in backward (its group belongs to a region that runs again)
};

struct group_description {
  std::size_t root = 0;           // the node it writes
  group_kind kind{};
  loop_kind loop{};               // its loop's shape (elementwise and reduction groups only)
  bool backward = false;
  bool recomputed = false;        // run again in backward, before the first group that reads its region
  std::size_t region = no_index;  // the checkpoint node whose region holds it
  std::size_t nodes = 0;          // nodes it computes: its root, the nodes fused into it and its side output
  std::size_t side = no_index;    // its side output (a cast of its root it writes too: lower/schedule.hpp)
};

struct block_description;

struct step_description {
  std::span<const node_description> node;    // in topological order
  std::span<const group_description> group;  // in the order they run
  std::size_t forward_end = 0;               // nodes [0, forward_end) are the forward part
  std::span<const std::size_t> first_child;  // node i's children: children[first_child[i] .. first_child[i + 1])
  std::span<const std::size_t> children;
  std::span<const block_description> blocks;  // one per stack node, in node order

  constexpr std::size_t size() const { return node.size(); }
  constexpr std::size_t group_count() const { return group.size(); }
  // The children a node reads values from (a random mask and a run-time
  // scalar read only their children's shapes: none here).
  constexpr std::size_t child_count(std::size_t i) const { return first_child[i + 1] - first_child[i]; }
  constexpr std::size_t child(std::size_t i, std::size_t k) const { return children[first_child[i] + k]; }
};

// A ctg::nn::stack node and the step it runs once per layer: its block's
// forward part, then its backward part (graph/stack.hpp's backward_step;
// exec/stack_runner.hpp runs it).
struct block_description {
  std::size_t stack = 0;
  const step_description* step = nullptr;
};

namespace detail {

template <class T>
consteval std::string_view dtype_name() {
  if constexpr (index_type<T>) return "i32";
  else return dtype_traits<T>::name;
}

consteval std::string_view leaf_role_name(leaf_role r) {
  switch (r) {
    case leaf_role::param: return "param";
    case leaf_role::frozen: return "frozen";
    case leaf_role::input: return "input";
    case leaf_role::carry: return "carry";
    case leaf_role::state: return "state";
  }
  return "";
}

// The op of a node of kind k, for the kinds that have one op (the others are
// named from their type: describe_type).
consteval std::string_view kind_op_name(node_kind k) {
  switch (k) {
    case node_kind::runtime_scalar: return "1/count";  // a mean's scale (recip_count_node)
    case node_kind::matmul: return "matmul";
    case node_kind::transpose: return "transpose";
    case node_kind::gather: return "gather";
    case node_kind::scatter_add: return "scatter_add";
    case node_kind::stack_grad: return "stack_grad";
    case node_kind::quantize: return "quantize";
    case node_kind::dequantize: return "dequantize";
    case node_kind::fp8_matmul: return "fp8_matmul";
    case node_kind::leaf:
    case node_kind::constant:
    case node_kind::random:
    case node_kind::elementwise:
    case node_kind::reduce:
    case node_kind::view:
    case node_kind::stack:
    case node_kind::attention:
    case node_kind::failed: return "";
  }
  return "";
}

// A product's op with the operands it reads transposed: "matmul a^T b".
// ("matmul summed": the sum of the batches' products.)
consteval std::string_view product_op_name(node_kind k, bool ta, bool tb, bool summed = false) {
  constexpr std::string_view plain[4] = {"matmul", "matmul a b^T", "matmul a^T b", "matmul a^T b^T"};
  constexpr std::string_view sums[4] = {"matmul summed", "matmul summed a b^T", "matmul summed a^T b",
                                        "matmul summed a^T b^T"};
  constexpr std::string_view fp8[4] = {"fp8_matmul", "fp8_matmul a b^T", "fp8_matmul a^T b", "fp8_matmul a^T b^T"};
  constexpr std::string_view fp8_sums[4] = {"fp8_matmul summed", "fp8_matmul summed a b^T",
                                            "fp8_matmul summed a^T b", "fp8_matmul summed a^T b^T"};
  if (k == node_kind::fp8_matmul) return (summed ? fp8_sums : fp8)[2 * ta + tb];
  return (summed ? sums : plain)[2 * ta + tb];
}

// What the node's type says: op, name, dtype, dims, grad.
template <class N>
consteval node_description describe_type() {
  node_description d;
  d.kind = N::kind;
  d.dtype = dtype_name<typename N::dtype>();
  d.dims = value_of<typename N::dims>();
  d.requires_grad = N::requires_grad;
  constexpr node_kind k = N::kind;
  if constexpr (k == node_kind::leaf) {
    d.role = N::role;
    d.op = leaf_role_name(N::role);
    d.name = {N::name.c_str(), N::name.size()};
  } else if constexpr (k == node_kind::elementwise || k == node_kind::reduce) {
    d.op = N::op::name;
  } else if constexpr (k == node_kind::constant) {
    d.op = "constant";
    d.value = N::value;
  } else if constexpr (k == node_kind::random) {
    d.op = "dropout_mask";
    d.name = {N::name.c_str(), N::name.size()};
    d.value = N::probability;
  } else if constexpr (k == node_kind::view) {
    if constexpr (requires { N::part; }) d.op = "stack_grad_part";
    else if constexpr (requires { N::value_index; }) d.op = N::value_index == 0 ? "attention_dq" : N::value_index == 1 ? "attention_dk" : "attention_dv";
    else d.op = "reshape";
  } else if constexpr (k == node_kind::stack) {
    d.op = "stack";
    d.layers = N::layers;
    d.recomputes_layers = N::recompute;
  } else if constexpr (k == node_kind::matmul || k == node_kind::fp8_matmul) {
    d.op = product_op_name(k, N::transpose_a, N::transpose_b, N::sum_batches);
  } else if constexpr (k == node_kind::attention) {
    constexpr std::string_view names[] = {"attention_lse", "causal_attention", "attention_grad"};
    d.op = names[static_cast<int>(N::pass)];
  } else {
    d.op = kind_op_name(k);
  }
  return d;
}

// The nodes i of Key for which keep(schedule table, i) holds, in order
// (.first), and how many (.second).
template <class Key, class Keep>
consteval auto nodes_where(Keep keep) {
  constexpr std::size_t n = step_of<Key>::nodes::size;
  std::array<std::size_t, n> at{};
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (keep(schedule_table<Key>, i)) at[count++] = i;
  return std::pair{at, count};
}
inline constexpr auto is_group_root = [](const auto& t, std::size_t i) { return t.is_group_root(i); };
inline constexpr auto is_stack = [](const auto& t, std::size_t i) { return t.node[i].kind == node_kind::stack; };

template <class Key, std::size_t Root>
consteval loop_kind loop_of() {
  constexpr group_kind k = kind_info_of(schedule_table<Key>.node[Root].kind).group;
  if constexpr (k == group_kind::elementwise || k == group_kind::reduction) return group_info<Key, Root>::loop;
  else return loop_kind::flat;
}

// What a step_description points into (but its blocks): N nodes, E value edges, G groups.
template <std::size_t N, std::size_t E, std::size_t G>
struct description_tables {
  std::array<node_description, N> node{};
  std::array<group_description, G> group{};
  std::size_t forward_end = 0;
  std::array<std::size_t, N + 1> first_child{};
  std::array<std::size_t, E> children{};
};

template <class Key>
consteval auto make_description() {
  using nodes = typename step_of<Key>::nodes;
  constexpr const auto& t = schedule_table<Key>;
  constexpr const auto& p = program_of<Key>;
  constexpr std::size_t N = nodes::size, E = t.first_child[N], G = t.group_count;
  constexpr auto roots = nodes_where<Key>(is_group_root).first;  // groups run in the order of their roots
  description_tables<N, E, G> d;
  d.forward_end = p.forward_end;
  for (std::size_t i = 0; i <= N; ++i) d.first_child[i] = t.first_child[i];
  for (std::size_t e = 0; e < E; ++e) d.children[e] = t.children[e];

  ct_buffer<std::size_t> group_of_root(N);
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    ((d.group[K].loop = loop_of<Key, roots[K]>()), ...);
  }(std::make_index_sequence<G>{});
  for (std::size_t g = 0; g < G; ++g) {
    group_description& gd = d.group[g];
    gd.root = roots[g];
    gd.kind = kind_info_of(t.node[gd.root].kind).group;
    gd.backward = gd.root >= p.forward_end;
    gd.region = p.region[gd.root];
    gd.side = t.side[gd.root] == no_node ? no_index : t.side[gd.root];
    group_of_root[gd.root] = g;
  }
  for (std::size_t q = 0; q < p.len; ++q)
    if (p.recompute[q]) d.group[group_of_root[p.root[q]]].recomputed = true;

  [&]<class... Ns>(tl::list<Ns...>) {
    std::size_t i = 0;
    ((d.node[i++] = describe_type<Ns>()), ...);
  }(nodes{});
  for (std::size_t i = 0; i < N; ++i) {
    node_description& nd = d.node[i];
    nd.output = t.node[i].output;
    nd.backward = i >= p.forward_end;
    nd.checkpoint = t.node[i].region_end;
    nd.region = p.region[i];
    nd.buffer = p.owns[i];
    nd.kept = p.kept[i];
    nd.duplicated = t.duplicated[i];
    if (t.group[i] != no_group) {
      nd.group = group_of_root[t.group[i]];
      nd.recomputed = d.group[nd.group].recomputed;
      ++d.group[nd.group].nodes;
    }
  }
  return d;
}

template <class Key>
inline constexpr auto description_tables_of = make_description<Key>();

// Key's stack nodes, each with the description of its block's step: defined
// below description_of, which they point to.
template <class Key>
consteval auto make_blocks();
template <class Key>
inline constexpr auto blocks_of = make_blocks<Key>();

template <class Key>
inline constexpr step_description description_of = {
    description_tables_of<Key>.node,        description_tables_of<Key>.group,
    description_tables_of<Key>.forward_end, description_tables_of<Key>.first_child,
    description_tables_of<Key>.children,    blocks_of<Key>};

template <class Key>
consteval auto make_blocks() {
  constexpr auto stacks = nodes_where<Key>(is_stack);
  std::array<block_description, stacks.second> blocks{};
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    using nodes = typename step_of<Key>::nodes;
    ((blocks[K] = {stacks.first[K],
                   &description_of<step_key_t<typename tl::at_t<stacks.first[K], nodes>::backward_step>>}),
     ...);
  }(std::make_index_sequence<stacks.second>{});
  return blocks;
}

}  // namespace detail

// The description of a compiled step (a graph_step, or its key).
template <class S>
inline constexpr const step_description& description = detail::description_of<step_key_t<step_of<S>>>;

}  // namespace ctg

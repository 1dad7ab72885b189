#pragma once
// The first lowering pass: a step's node types become one constexpr table of
// small descriptors (kind, dims, flags), with the children of all nodes in
// one array (compressed rows: node i's children are child(i, 0 .. nchild-1)),
// so no descriptor pays for the widest node. What each node kind means to the
// passes after this one is stated once, in kind_info_of; no pass lists kinds.
#include <bit>
#include <cstddef>
#include <cstring>

#include <ctg/graph/attention.hpp>
#include <ctg/graph/step.hpp>
#include <ctg/graph/traits.hpp>

namespace ctg {

// What a fusion group is, for tests and summaries (count_groups).
enum class group_kind { elementwise, reduction, matmul, transpose, gather, scatter_add, stack, fp8, attention };

namespace detail {

// The properties of a node kind that the lowering passes read.
struct kind_info {
  bool source = false;         // has a value before any group runs (leaf, constant, scalar, random): no region owns it
  bool inlined = false;        // no buffer: re-evaluated inside every loop that reads it (constant, random)
  bool shares_buffer = false;  // its value is its child's buffer under another shape (view)
  bool stored = false;         // its buffer belongs to the store or a feed (leaf)
  bool reads_buffers = false;  // reads its children from buffers: nothing is inlined into it
  bool runs_alone = false;     // a group of its own, never fused
  group_kind group = group_kind::elementwise;
};

constexpr kind_info kind_info_of(node_kind k) {
  kind_info i;
  switch (k) {
    case node_kind::leaf: i.source = i.stored = true; break;
    case node_kind::constant:
    case node_kind::random: i.source = i.inlined = true; break;
    case node_kind::runtime_scalar: i.source = true; break;
    case node_kind::elementwise: break;
    case node_kind::reduce: i.group = group_kind::reduction; break;
    case node_kind::view: i.shares_buffer = i.reads_buffers = true; break;
    case node_kind::matmul:
    case node_kind::fp8_matmul: i.reads_buffers = i.runs_alone = true; i.group = group_kind::matmul; break;
    case node_kind::transpose: i.reads_buffers = i.runs_alone = true; i.group = group_kind::transpose; break;
    case node_kind::gather: i.reads_buffers = i.runs_alone = true; i.group = group_kind::gather; break;
    case node_kind::scatter_add: i.reads_buffers = i.runs_alone = true; i.group = group_kind::scatter_add; break;
    case node_kind::stack:
    case node_kind::stack_grad: i.reads_buffers = i.runs_alone = true; i.group = group_kind::stack; break;
    case node_kind::quantize:
    case node_kind::dequantize: i.reads_buffers = i.runs_alone = true; i.group = group_kind::fp8; break;
    case node_kind::attention: i.reads_buffers = i.runs_alone = true; i.group = group_kind::attention; break;
    case node_kind::failed: break;  // never reaches a table: no step holds one
  }
  return i;
}

// How a node's run-time shape follows from the shapes before it
// (exec/runtime_shapes.hpp applies it).
enum class shape_rule : unsigned char {
  static_dims,  // its static dims (stored leaves, stacked parts of parameters, scatter_add)
  fed,          // set by its feed
  scalar,       // rank 0 (constants, run-time scalars)
  same_as,      // that of node `shape_from` (a random mask's Like, quantize, a stack, ...)
  fill_dyn,     // its static dims, the dyn ones from node `shape_from` (one_hot, attention's lse)
  reduce,       // fill_dyn, and each kept static dim must be the child's at run time (sum_to<S>)
  stretch,      // its static dims, which its child's must stretch to at run time (broadcast_to<S>)
  broadcast,    // the numpy broadcast of its children's (elementwise)
  reshape,      // its child's elements under its static dims
  gather,       // the ids' shape, then the table's row
  transpose,    // its child's, the last two dims swapped
  matmul,       // batch dims broadcast, then [M, N] of op(A) op(B) (transpose_a/b); [M, N] alone (sum_batches)
};

inline constexpr std::size_t no_node = static_cast<std::size_t>(-1);

struct node_desc {
  node_kind kind{};
  std::size_t nchild = 0;
  bool row_reduction = false;
  bool index_aware = false;  // an elementwise op that reads its own position (one_hot, causal_mask)
  bool reads_row = false;    // one that reads its row's index too (causal_mask)
  bool cheap = false;        // an elementwise op of a few adds, multiplies or comparisons (a_few_adds)
  bool cast = false;         // an op::cast: its child's value in another dtype
  bool region_end = false;   // a checkpoint: always a buffer of its own, kept for backward
  bool output = false;       // an output of the step (or the forward part's root): a buffer to the end
  bool max_reduce = false;   // a max reduction (over no element: a run-time error)
  shape_value dims{};
  shape_value child_dims{};  // of child 0

  // What the runtime reads (exec/): sizes, leaves, shape rules.
  std::size_t elem_bytes = 0;     // sizeof(dtype)
  bool stored = false;            // a leaf the store keeps: trainable, frozen or state
  bool fed = false;               // a leaf bound from a feed (an input, a stack's carry)
  bool grad = false;              // a leaf the step differentiates (in wrt): it has a gradient buffer
  bool frozen = false;            // a frozen leaf (never trained)
  bool has_initial = false;       // a state leaf starting at initial_bits in every element
  unsigned long long initial_bits = 0;
  const char* name = nullptr;     // a leaf's name
  shape_rule shape{};
  std::size_t shape_from = no_node;
  std::size_t count_of[2] = {no_node, no_node};  // a mean's run-time scalar: 1 / (numel [0] / numel [1])
  void (*store_scalar)(double, std::byte*) = nullptr;  // a run-time scalar: its value in its dtype
  bool transpose_a = false, transpose_b = false;  // matmul, fp8_matmul: op = transpose
  bool sum_batches = false;       // a (fp8_)matmul summed over its batches (graph/node.hpp)
  bool delayed = false;           // a quantize with delayed scaling (it records an amax)
  std::size_t layers = 1;         // its buffer holds this many values of its shape (a stack's layers, two
                                  // where no backward reads them: schedule.hpp; dq, dk, dv)
  std::size_t extra_bytes = 0;    // a stack's backward: its parameter gradients before the input's
  std::size_t byte_offset = 0;    // a view: where its value starts in its base's buffer
  std::size_t value_index = 0;    // a view of value k of a base holding several: k values of its shape further
};

inline constexpr std::size_t no_group = static_cast<std::size_t>(-1);

// Scratch for a constexpr pass: n zeroed values, freed when it goes out of scope.
template <class T>
class ct_buffer {
 public:
  constexpr explicit ct_buffer(std::size_t n) : p_(new T[n + 1]{}) {}
  constexpr ~ct_buffer() { delete[] p_; }
  ct_buffer(const ct_buffer&) = delete;
  ct_buffer& operator=(const ct_buffer&) = delete;
  constexpr T& operator[](std::size_t i) { return p_[i]; }
  constexpr const T& operator[](std::size_t i) const { return p_[i]; }
  constexpr T* data() { return p_; }

 private:
  T* p_;
};

// A table's nodes and child edges, its size a value rather than part of its
// type: what the run-time passes that need nothing else read
// (exec/runtime_shapes.hpp), so their code is compiled once, not once for
// every step.
struct table_view {
  const node_desc* node = nullptr;
  const std::size_t* first_child = nullptr;
  const std::size_t* children = nullptr;
  std::size_t size = 0;

  constexpr std::size_t child(std::size_t i, std::size_t k) const { return children[first_child[i] + k]; }
};

// N nodes with E child edges in all.
template <std::size_t N, std::size_t E>
struct plan_table {
  static constexpr std::size_t size = N;
  node_desc node[N]{};
  std::size_t first_child[N + 1]{};
  std::size_t children[E + 1]{};
  bool materialized[N]{};
  std::size_t group[N]{};  // the root of the group a node is computed in (no_group: leaf, constant, scalar)
  bool duplicated[N]{};    // no group and no buffer: computed again inside each group that reads it
  std::size_t side[N]{};   // a group root's side output (a cast of it the group writes too: schedule.hpp), or no_node
  std::size_t group_count = 0;

  constexpr std::size_t child(std::size_t i, std::size_t k) const { return children[first_child[i] + k]; }
  constexpr table_view view() const { return {node, first_child, children, N}; }

  constexpr bool same_dims(const shape_value& a, const shape_value& b) const {
    if (a.rank != b.rank) return false;
    for (std::size_t i = 0; i < a.rank; ++i)
      if (a.d[i] != b.d[i]) return false;
    return true;
  }
  // The shape a group's loop runs over.
  constexpr const shape_value& iteration_dims(std::size_t root) const {
    return node[root].kind == node_kind::reduce ? node[root].child_dims : node[root].dims;
  }
  constexpr bool is_group_root(std::size_t i) const { return group[i] == i; }
  // The stack_grad node that runs stack node s's layers backward, or N: none
  // (a step with no backward over the stack).
  constexpr std::size_t stack_grad_of(std::size_t s) const {
    for (std::size_t j = s + 1; j < N; ++j)
      if (node[j].kind == node_kind::stack_grad && child(j, 0) == s) return j;
    return N;
  }
};

// Element ops of a few adds, multiplies or comparisons: cheap enough to
// compute again in every loop that reads them rather than write the value
// and read it back (schedule.hpp, duplicated nodes). Not a division or a
// transcendental function: on a CPU, where a step's values sit in cache,
// computing one again costs more than reading it (the realistic step on
// the CPU ran 1.45x slower with a softmax's exp duplicated; bench/RESULTS.md).
template <class Op>
inline constexpr bool a_few_adds =
    tl::contains<Op, tl::list<op::no_grad, op::neg, op::square, op::abs, op::relu, op::sign, op::step, op::add,
                              op::sub, op::mul, op::equal, op::keep_where>>::value;
template <class T>
inline constexpr bool a_few_adds<op::cast<T>> = true;
template <class S, class Like>
inline constexpr bool a_few_adds<op::broadcast<S, Like>> = true;
template <class S, int... Ignore>
inline constexpr bool a_few_adds<op::one_hot<S, Ignore...>> = true;
template <int Ignore>
inline constexpr bool a_few_adds<op::index_valid<Ignore>> = true;
template <bool NegInf>
inline constexpr bool a_few_adds<op::causal_mask<NegInf>> = true;
template <int Axis>
inline constexpr bool a_few_adds<op::log_softmax_sub<Axis>> = true;

template <class Op>
inline constexpr bool is_cast_op = false;
template <class T>
inline constexpr bool is_cast_op<op::cast<T>> = true;

// The child edges a node contributes (random and runtime scalars read their
// children's shapes only, not their values).
template <class N>
inline constexpr std::size_t edges_of = N::kind == node_kind::runtime_scalar || N::kind == node_kind::random
                                            ? 0
                                            : N::children::size;

// The bit pattern of value V in dtype T (at most 8 bytes).
template <class T>
constexpr unsigned long long element_bits(double v) {
  const T x = store_as<T>(v);
  if constexpr (sizeof(T) == 1) return std::bit_cast<unsigned char>(x);
  else if constexpr (sizeof(T) == 2) return std::bit_cast<unsigned short>(x);
  else if constexpr (sizeof(T) == 4) return std::bit_cast<unsigned int>(x);
  else return std::bit_cast<unsigned long long>(x);
}

// A run-time scalar's value, rounded once to T, as T's bytes.
template <class T>
void store_scalar_as(double v, std::byte* out) {
  const T x = store_as<T>(v);
  std::memcpy(out, &x, sizeof x);
}

// What a node is, whatever step it is in: everything but its indices and
// its role in the step (output, gradient). Computed once per node type and
// shared by every step that holds the node.
template <class N>
consteval node_desc node_facts() {
  node_desc d;
  d.kind = N::kind;
  d.dims = value_of<typename N::dims>();
  d.nchild = edges_of<N>;
  if constexpr (N::children::size > 0) d.child_dims = value_of<typename tl::at_t<0, typename N::children>::dims>();
  if constexpr (N::kind == node_kind::reduce) d.row_reduction = N::row_reduction;
  if constexpr (N::kind == node_kind::elementwise) {
    d.index_aware = requires { N::op::index_aware; };
    d.reads_row = requires { N::op::reads_row; };
    d.region_end = requires { N::op::region_end; };
    d.cheap = a_few_adds<typename N::op>;
    d.cast = is_cast_op<typename N::op>;
  }
  d.elem_bytes = sizeof(typename N::dtype);
  if constexpr (N::kind == node_kind::leaf) {
    d.stored = !N::fed;
    d.fed = N::fed;
    d.frozen = N::role == leaf_role::frozen;
    d.name = N::name.c_str();
    if constexpr (requires { N::initial_value; }) {
      d.has_initial = true;
      d.initial_bits = element_bits<typename N::dtype>(N::initial_value);
    }
  }
  // How its run-time shape is found (see shape_rule; the source's index is the step's).
  if constexpr (N::kind == node_kind::leaf) d.shape = N::fed ? shape_rule::fed : shape_rule::static_dims;
  else if constexpr (N::kind == node_kind::constant) d.shape = shape_rule::scalar;
  else if constexpr (N::kind == node_kind::runtime_scalar) {
    d.shape = shape_rule::scalar;
    d.store_scalar = &store_scalar_as<typename N::dtype>;
  } else if constexpr (N::kind == node_kind::random || N::kind == node_kind::quantize ||
                       N::kind == node_kind::dequantize || N::kind == node_kind::stack ||
                       N::kind == node_kind::stack_grad)
    d.shape = shape_rule::same_as;
  else if constexpr (N::kind == node_kind::elementwise) {
    using Op = typename N::op;
    if constexpr (requires { typename Op::like; }) {
      d.shape = std::is_void_v<typename Op::like> ? shape_rule::stretch : shape_rule::same_as;
    } else if constexpr (requires { typename Op::result_shape; }) {
      d.shape = shape_rule::fill_dyn;  // e.g. one_hot: the op's own shape, its dyn dims its child's
    } else {
      d.shape = shape_rule::broadcast;
    }
  } else if constexpr (N::kind == node_kind::reduce) {
    d.shape = shape_rule::reduce;
    d.max_reduce = std::is_same_v<typename N::op, op::max_r>;
  }
  else if constexpr (N::kind == node_kind::view && requires { N::part; }) {
    // a part of a stack's gradient: the stack input's shape, or a stacked leaf's
    d.shape = N::part == 0 ? shape_rule::same_as : shape_rule::static_dims;
  } else if constexpr (N::kind == node_kind::view && requires { N::value_index; }) {
    d.shape = shape_rule::same_as;  // one of attention's gradients: q's shape
  } else if constexpr (N::kind == node_kind::view && requires { typename N::like; }) {
    d.shape = std::is_void_v<typename N::like> ? shape_rule::reshape : shape_rule::same_as;  // (like's: its dims)
  } else if constexpr (N::kind == node_kind::view) d.shape = shape_rule::reshape;
  else if constexpr (N::kind == node_kind::gather) d.shape = shape_rule::gather;
  else if constexpr (N::kind == node_kind::scatter_add) d.shape = shape_rule::static_dims;
  else if constexpr (N::kind == node_kind::transpose) d.shape = shape_rule::transpose;
  else if constexpr (N::kind == node_kind::attention)
    d.shape = N::pass == attention_pass::lse ? shape_rule::fill_dyn  // q's dims, the features' 1
                                              : shape_rule::same_as;
  else {
    static_assert(N::kind == node_kind::matmul || N::kind == node_kind::fp8_matmul);
    d.shape = shape_rule::matmul;
  }
  if constexpr (N::kind == node_kind::matmul || N::kind == node_kind::fp8_matmul) {
    d.transpose_a = N::transpose_a;
    d.transpose_b = N::transpose_b;
    d.sum_batches = N::sum_batches;
  }
  if constexpr (N::kind == node_kind::quantize) d.delayed = N::scaling::is_delayed;
  if constexpr (N::kind == node_kind::stack) d.layers = N::layers;
  if constexpr (requires { N::values; }) d.layers = N::values;
  if constexpr (requires { N::value_index; }) d.value_index = N::value_index;
  if constexpr (N::kind == node_kind::stack_grad) d.extra_bytes = N::leading_bytes;
  if constexpr (requires { N::byte_offset; }) d.byte_offset = N::byte_offset;
  return d;
}
template <class N>
inline constexpr node_desc node_facts_v = node_facts<N>();

// The nodes a node's shape rule (or a mean's 1/count) reads by index: a
// tl::list of up to two node types.
template <class N>
consteval auto shape_sources() {
  if constexpr (N::kind == node_kind::runtime_scalar) return typename N::children{};  // (the seed: none)
  else if constexpr (N::kind == node_kind::elementwise) {
    if constexpr (requires { typename N::op::like; }) {
      if constexpr (std::is_void_v<typename N::op::like>) return tl::list<>{};
      else return tl::list<typename N::op::like>{};
    } else if constexpr (requires { typename N::op::result_shape; }) {
      return tl::list<tl::at_t<0, typename N::children>>{};
    } else {
      return tl::list<>{};
    }
  } else if constexpr (N::kind == node_kind::view && requires { typename N::like; }) {
    if constexpr (std::is_void_v<typename N::like>) return tl::list<tl::at_t<0, typename N::children>>{};
    else return tl::list<typename N::like>{};
  } else if constexpr (N::children::size > 0 && (N::kind == node_kind::random || N::kind == node_kind::quantize ||
                                                 N::kind == node_kind::dequantize || N::kind == node_kind::stack ||
                                                 N::kind == node_kind::stack_grad || N::kind == node_kind::reduce ||
                                                 N::kind == node_kind::view || N::kind == node_kind::attention)) {
    return tl::list<tl::at_t<0, typename N::children>>{};
  } else {
    return tl::list<>{};
  }
}

// Node i of a step: its facts, then what depends on the step. (On the
// step's key, not its node list: what is instantiated per node must not
// spell the list in its name; see core/type_list.hpp.)
template <class Key, class N, std::size_t Size, std::size_t E>
constexpr void describe(plan_table<Size, E>& t, std::size_t i, std::size_t& edge, bool output, bool grad) {
  using Nodes = typename step_of<Key>::nodes;
  node_desc& d = t.node[i];
  d = node_facts_v<N>;
  d.output = output;
  d.grad = grad && d.stored;  // (a stack carry's gradient is read from the output)
  t.first_child[i] = edge;
  if constexpr (edges_of<N> > 0)
    [&]<class... C>(tl::list<C...>) {
      ((t.children[edge++] = tl::index_of<C, Nodes>::value), ...);
    }(typename N::children{});
  t.first_child[i + 1] = edge;
  [&]<class... S>(tl::list<S...>) {
    if constexpr (N::kind == node_kind::runtime_scalar) {
      std::size_t k = 0;
      ((d.count_of[k++] = tl::index_of<S, Nodes>::value), ...);
    } else {
      static_assert((tl::contains<S, Nodes>::value && ...), "ctg: internal: a node's shape comes from outside the graph");
      ((d.shape_from = tl::index_of<S, Nodes>::value), ...);
    }
  }(decltype(shape_sources<N>()){});
}

// The table of the nodes of the step keyed Key, groups not yet decided.
template <class Key>
consteval auto describe_step() {
  using Step = step_of<Key>;
  using nodes = typename Step::nodes;
  constexpr std::size_t E = []<class... Ns>(tl::list<Ns...>) {
    return (std::size_t(0) + ... + edges_of<Ns>);
  }(nodes{});
  plan_table<nodes::size, E> p;
  [&]<class... Ns>(tl::list<Ns...>) {
    std::size_t i = 0, edge = 0;
    ((describe<Key, Ns, nodes::size, E>(p, i++, edge,
                             (tl::contains<Ns, typename Step::outputs>::value &&
                              (Step::root_is_output || !CTG_SAME(Ns, typename Step::root))) ||
                                 CTG_SAME(Ns, typename Step::forward_root),
                             tl::contains<Ns, typename Step::wrt>::value)),
     ...);
  }(nodes{});
  return p;
}

}  // namespace detail
}  // namespace ctg

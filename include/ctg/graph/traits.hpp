#pragma once
// Compile-time queries over a graph: its nodes in topological order, whether a
// leaf has a gradient path, and the trainable leaves a loss reaches.
#include <cstdint>
#include <type_traits>

#include <ctg/graph/node.hpp>

namespace ctg {

// ------------------------------------------------------- topological order ---
namespace detail {
template <class Acc, class N, bool Seen = tl::contains<N, Acc>::value>
struct topo_visit {
  using type = Acc;  // already listed
};
template <class Acc, class Children>
struct topo_children;
template <class Acc>
struct topo_children<Acc, tl::list<>> {
  using type = Acc;
};
template <class Acc, class C, class... Cs>
struct topo_children<Acc, tl::list<C, Cs...>>
    : topo_children<typename topo_visit<Acc, C>::type, tl::list<Cs...>> {};
template <class Acc, class N>
struct topo_visit<Acc, N, false> {
  using type = typename tl::push_back<typename topo_children<Acc, typename N::children>::type, N>::type;
};
}  // namespace detail

// Every node reachable from Roots (a tl::list), children before parents, each once.
template <class Roots>
using topo_t = typename detail::topo_children<tl::list<>, Roots>::type;

// ----------------------------------------------------------- gradient path ---
namespace detail {
template <class E, class L>
consteval bool grad_path();
}
// True when a gradient of E reaches trainable leaf L (not through no_grad, not frozen).
template <class E, class L>
inline constexpr bool has_grad_path_v = detail::grad_path<E, L>();

namespace detail {
template <class E, class L>
consteval bool grad_path() {
  if constexpr (CTG_SAME(E, L)) return L::requires_grad;
  else if constexpr (!E::requires_grad) return false;
  else return []<class... C>(tl::list<C...>) { return (has_grad_path_v<C, L> || ...); }(typename E::children{});
}

// N, when it is a trainable leaf E's gradient reaches (on E and N only: what
// is instantiated per node must not spell the node list, core/type_list.hpp).
template <class E, class N>
consteval auto trained_leaf() {
  if constexpr (is_leaf_v<N>) {
    if constexpr (N::role == leaf_role::param) {  // (a path search only for parameters)
      if constexpr (has_grad_path_v<E, N>) return tl::list<N>{};
      else return tl::list<>{};
    } else {
      return tl::list<>{};
    }
  } else {
    return tl::list<>{};
  }
}
template <class E, class Nodes>
struct trainable_leaves;
template <class E, class... Ns>
struct trainable_leaves<E, tl::list<Ns...>> {
  using type = tl::concat_t<decltype(trained_leaf<E, Ns>())...>;
};
}  // namespace detail

// The trainable leaves E's gradient reaches, in topological order.
template <class E>
using params_t = typename detail::trainable_leaves<E, topo_t<tl::list<E>>>::type;

// ------------------------------------------------------------ replay ----
namespace detail {
template <class N>
consteval bool replayable_node() {
  if constexpr (requires { N::state_replay; }) return N::state_replay == replay::exact;
  else return true;
}
template <class N>
consteval bool replayable_below();
}  // namespace detail

// True when every node E recomputes from (down to leaves and nested
// checkpoints) can be replayed exactly: see ctg::replay.
template <class E>
inline constexpr bool replayable_below_v = detail::replayable_below<E>();

namespace detail {
template <class N>
consteval bool replayable_below() {
  if constexpr (!replayable_node<N>()) return false;
  else return []<class... C>(tl::list<C...>) {
    auto one = []<class K>(std::type_identity<K>) {
      if constexpr (K::kind == node_kind::elementwise && requires { K::op::region_end; }) return true;
      else return replayable_below_v<K>;
    };
    (void)one;  // a leaf has no children
    return (one(std::type_identity<C>{}) && ...);
  }(typename N::children{});
}
}  // namespace detail

// ---------------------------------------------------------- leaf checks ----
namespace detail {
template <class Nodes>
struct leaves_of;
template <class... Ns>
struct leaves_of<tl::list<Ns...>> {
  using type = tl::concat_t<std::conditional_t<is_leaf_v<Ns>, tl::list<Ns>, tl::list<>>...>;
};

// The first pair (i, j), i < j, of leaves with one name (i = j = n: none).
// The leaves of a graph are distinct types, so two of them with one name
// clash. (Names compared as strings in one constexpr loop: no template
// instantiation per pair.)
struct leaf_pair {
  std::size_t a, b;
};
consteval bool same_chars(const char* x, const char* y) {
  while (*x && *x == *y) ++x, ++y;
  return *x == *y;
}
template <class... Ls>
consteval leaf_pair first_name_clash(tl::list<Ls...>) {
  constexpr std::size_t n = sizeof...(Ls);
  const char* names[] = {Ls::name.c_str()..., nullptr};
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j)
      if (same_chars(names[i], names[j])) return {i, j};
  return {n, n};
}
template <class A, class B>
consteval bool same_name_different_leaf() {
  if constexpr (CTG_SAME(A, B)) return false;
  else return same_chars(A::name.c_str(), B::name.c_str());
}
// A clash, reported in a function templated on both leaves, so that the
// compiler's note names them.
template <class A, class B>
consteval void report_name_clash() {
  static_assert(!same_name_different_leaf<A, B>(),
                "ctg: two different leaves share one name (the note above names both: [with A = ...; B = ...])");
}
}  // namespace detail

// The leaves among Nodes, in order.
template <class Nodes>
using leaves_t = typename detail::leaves_of<Nodes>::type;

// False when two different leaves of the graph share a name.
template <class Nodes>
inline constexpr bool leaf_names_unique_v = detail::first_name_clash(leaves_t<Nodes>{}).a == leaves_t<Nodes>::size;

namespace detail {
// Reports the first two leaves of Nodes that share a name, if any; always
// true, so that a static_assert over it adds no error of its own.
template <class Nodes>
consteval bool check_leaf_names() {
  constexpr leaf_pair p = first_name_clash(leaves_t<Nodes>{});
  if constexpr (p.a < leaves_t<Nodes>::size)
    report_name_clash<tl::at_t<p.a, leaves_t<Nodes>>, tl::at_t<p.b, leaves_t<Nodes>>>();
  return true;
}

// A dropout's name keys its random stream: two dropouts of one graph with one
// name would draw one mask (their drops the same elements). The graph's
// own, and each stack's block's (one name for all its layers, each layer
// drawing its own stream): two stacks of one block ("layers.{i}" both)
// would give their layers k one mask, though the block's is one node type.
//
// A dropout D of the graph and how many layer keys it draws with: 1 outside
// stacks, N in a stack of N layers, N x M in a stack of M inside it (outer
// layer o's layer i is keyed o * M + i).
template <class D, std::uint64_t Layers>
struct keyed_dropout {
  using node = D;
  static constexpr std::uint64_t layers = Layers;
};
// The dropouts among Nodes and in their stacks' blocks, in order, each a keyed_dropout.
template <class Nodes, std::uint64_t Layers = 1>
struct dropouts_of;
template <class N, std::uint64_t Layers, bool = N::kind == node_kind::stack>
struct dropouts_in {
  using type = std::conditional_t<N::kind == node_kind::random, tl::list<keyed_dropout<N, Layers>>, tl::list<>>;
};
template <class N, std::uint64_t Layers>
struct dropouts_in<N, Layers, true> {
  using type = typename dropouts_of<typename N::forward_step::nodes, Layers * N::layers>::type;
};
template <class... Ns, std::uint64_t Layers>
struct dropouts_of<tl::list<Ns...>, Layers> {
  using type = tl::concat_t<typename dropouts_in<Ns, Layers>::type...>;
};

// Two names, one stream: a dropout draws stream hash(name) + 0x9E3779B9 x
// layer (mod 2^32), so two of a graph's names may draw one mask: at layer 0
// when their 32-bit hashes are equal (found by search: "blk.qfqysx.drop" and
// "blk.tlauom.drop"), or at layers a of one and b of the other where the
// hashes differ by 0x9E3779B9 x (b - a) ("layers.{i}.wqqnm" at layer 1 and
// "layers.{i}.mhrdz" at layer 0).
consteval bool streams_meet(std::uint32_t s, std::uint64_t s_layers, std::uint32_t t, std::uint64_t t_layers) {
  constexpr std::uint32_t step = 0x9E3779B9u;
  std::uint32_t inverse = step;  // step's inverse mod 2^32 (step is odd): Newton's iteration, 5 bits to 32+
  for (int i = 0; i < 4; ++i) inverse *= 2u - step * inverse;
  const std::uint32_t d = (t - s) * inverse;  // s's layer a meets t's layer b where a - b = d (mod 2^32)
  return d < s_layers || std::uint32_t(0u - d) < t_layers;
}
// The first pair of dropouts sharing a name, else the first pair of names
// meeting in one stream (a = b = n: none).
struct dropout_clash {
  std::size_t a, b;
  bool same_name;
};
template <class... Ks>
consteval dropout_clash first_dropout_clash(tl::list<Ks...>) {
  constexpr std::size_t n = sizeof...(Ks);
  const char* names[] = {Ks::node::name.c_str()..., nullptr};
  const std::uint32_t streams[] = {Ks::node::stream..., 0};
  const std::uint64_t layers[] = {Ks::layers..., 0};
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j)
      if (same_chars(names[i], names[j])) return {i, j, true};
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j)
      if (streams_meet(streams[i], layers[i], streams[j], layers[j])) return {i, j, false};
  return {n, n, false};
}
// Reported in functions templated on the names (a dropout's node type is
// an opaque node_ref), so that the compiler's note spells them.
template <auto Name>
consteval void report_dropout_name_clash() {
  static_assert(sizeof(decltype(Name)) == 0,
                "ctg: two dropouts share one name, so they would draw one mask: give each dropout its own name (the "
                "note above names it: [with auto Name = ...])");
}
template <auto A, auto B>
consteval void report_dropout_stream_clash() {
  static_assert(sizeof(decltype(A)) == 0,
                "ctg: two dropouts' names hash to one random stream, so they would draw one mask (in a stack, at "
                "some layers: a layer's stream is the hash plus 0x9E3779B9 times the layer): rename one of them (the "
                "note above names both: [with auto A = ...; auto B = ...])");
}
template <class Nodes>
consteval bool check_dropout_names() {
  using dropouts = typename dropouts_of<Nodes>::type;
  constexpr dropout_clash c = first_dropout_clash(dropouts{});
  if constexpr (c.a < dropouts::size) {
    using A = typename tl::at_t<c.a, dropouts>::node;
    using B = typename tl::at_t<c.b, dropouts>::node;
    if constexpr (c.same_name) report_dropout_name_clash<A::name>();
    else report_dropout_stream_clash<A::name, B::name>();
  }
  return true;
}
}  // namespace detail

}  // namespace ctg

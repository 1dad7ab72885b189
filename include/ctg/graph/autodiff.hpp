#pragma once
// Reverse-mode autodiff at compile time. Each op has one rule
// (graph/rules.hpp), written as ordinary ctg expressions, so the backward
// graph is a graph like any other and is scheduled and fused the same way. The gradient of node N is the sum, over
// every consumer C of N, of C's rule applied to C's gradient; each
// contribution is summed down to N's shape and cast to N's dtype.
#include <ctg/graph/rules.hpp>
#include <ctg/graph/step.hpp>
#include <ctg/graph/traits.hpp>

namespace ctg {

// ------------------------------------------------------- reverse sweep ----

struct no_gradient {};  // marks "no gradient reaches this node"

namespace detail {
template <class Loss, class N>
consteval auto gradient_of();
}

// The gradient expression of node N of Loss's graph. (What autodiff
// instantiates per node is named by Loss and the node, never by the list of
// Loss's nodes: see core/type_list.hpp.)
template <class Loss, class N>
using gradient_t = typename decltype(detail::gradient_of<Loss, N>())::type;

namespace detail {
// Who reads each node of Loss's graph: for node i, the (consumer, child slot)
// pairs in topological order of the consumer, computed once per graph as a
// constexpr table, so finding a node's consumers costs no template instantiations.
struct use {
  std::size_t consumer = 0, slot = 0;
};
struct use_edge {
  std::size_t child, consumer, slot;
};
template <class C>
inline constexpr bool passes_grad =
    C::kind != node_kind::runtime_scalar && C::kind != node_kind::random && C::requires_grad;
// The edges from consumer C (node c of Loss's graph) to its children.
template <class Loss, class C>
constexpr void append_use_edges(use_edge*& out, std::size_t c) {
  if constexpr (passes_grad<C>)
    [&]<class... Ks>(tl::list<Ks...>) {
      std::size_t k = 0;
      ((*out++ = use_edge{tl::index_of<Ks, topo_t<tl::list<Loss>>>::value, c, k++}), ...);
    }(typename C::children{});
}
template <class Loss>
struct uses_table {
  using Fwd = topo_t<tl::list<Loss>>;
  static constexpr std::size_t n = Fwd::size;
  static constexpr std::size_t total = []<class... Cs>(tl::list<Cs...>) {
    return (std::size_t(0) + ... + (passes_grad<Cs> ? Cs::children::size : 0));
  }(Fwd{});
  struct table_t {
    std::size_t first[n + 1]{};  // the uses of node i are entry[first[i] .. first[i+1])
    use entry[total + 1]{};
  };
  static constexpr table_t table = [] {
    use_edge edges[total + 1]{};
    [&]<class... Cs>(tl::list<Cs...>) {
      use_edge* out = edges;
      std::size_t c = 0;
      (append_use_edges<Loss, Cs>(out, c++), ...);
    }(Fwd{});
    table_t t;
    for (std::size_t j = 0; j < total; ++j) ++t.first[edges[j].child + 1];
    for (std::size_t i = 0; i < n; ++i) t.first[i + 1] += t.first[i];
    std::size_t fill[n + 1]{};
    for (std::size_t j = 0; j < total; ++j)  // edges come in consumer order: the uses stay in it
      t.entry[t.first[edges[j].child] + fill[edges[j].child]++] = use{edges[j].consumer, edges[j].slot};
    return t;
  }();
};

// The contribution of one use (consumer C at index CI, through its child slot K) to N.
template <class Loss, class N, std::size_t CI, std::size_t K>
consteval auto contribution() {
  using C = tl::at_t<CI, topo_t<tl::list<Loss>>>;
  using G = gradient_t<Loss, C>;
  if constexpr (CTG_SAME(G, no_gradient)) {
    return tl::list<>{};
  } else {
    using raw = decltype(rule<K>(C{}, G{}));
    using summed = decltype(sum_to<typename N::dims>(raw{}));
    return tl::list<decltype(cast<grad_dtype_t<N>>(summed{}))>{};
  }
}

template <class... Cs>
constexpr auto sum_contributions(tl::list<Cs...>) {
  if constexpr (sizeof...(Cs) == 0) return no_gradient{};
  else return (Cs{} + ...);
}

template <class Loss, class N>
consteval auto gradient_of() {
  if constexpr (CTG_SAME(N, Loss)) {
    return std::type_identity<loss_seed_node<typename Loss::dtype>>{};
  } else if constexpr (!N::requires_grad) {
    return std::type_identity<no_gradient>{};
  } else {
    constexpr auto& t = uses_table<Loss>::table;
    constexpr std::size_t i = tl::index_of<N, topo_t<tl::list<Loss>>>::value, first = t.first[i];
    return []<std::size_t... J>(std::index_sequence<J...>) {
      using all = tl::concat_t<
          decltype(contribution<Loss, N, t.entry[first + J].consumer, t.entry[first + J].slot>())...>;
      return std::type_identity<decltype(sum_contributions(all{}))>{};
    }(std::make_index_sequence<t.first[i + 1] - first>{});
  }
}
}  // namespace detail

namespace detail {
template <class Root, class... Leaves>
struct step_outputs<Root, tl::list<Leaves...>> {
  using type = tl::list<Root, gradient_t<Root, Leaves>...>;
};
}  // namespace detail

// ------------------------------------------------------- value_and_grad ----

namespace detail {
// The checks on one wrt leaf: the first that fails is reported alone.
template <class Loss, class L>
consteval bool check_wrt_leaf() {
  constexpr bool leaf = [] {
    if constexpr (expr<L>) return is_leaf_v<L>;
    else return false;
  }();
  if constexpr (!leaf) {
    static_assert(leaf, "ctg: wrt<...> takes leaves (ctg::param types)");
    return false;
  } else if constexpr (L::role == leaf_role::frozen) {
    static_assert(L::role != leaf_role::frozen,
                  "ctg: frozen parameter: a frozen leaf never has a gradient; remove it from wrt<...>");
    return false;
  } else if constexpr (L::role != leaf_role::param) {
    static_assert(L::role == leaf_role::param,
                  "ctg: no gradient path: only trainable parameters (ctg::param) get gradients, not inputs or state");
    return false;
  } else {
    static_assert(has_grad_path_v<Loss, L>,
                  "ctg: no gradient path from the loss to this parameter (unused, or reached only through no_grad)");
    return has_grad_path_v<Loss, L>;
  }
}

// value_and_grad(loss) differentiates every trainable parameter the loss
// reads; one it reads only through no_grad would be left out without a word
// (B5 again), so it is the error the explicit wrt<P> gives.
template <class Loss, class P>
consteval bool check_param_reached() {
  static_assert(has_grad_path_v<Loss, P>,
                "ctg: no gradient path: this trainable parameter (P in the note above) reaches the loss only "
                "through no_grad, so value_and_grad(loss) would leave it out: freeze it (ctg::frozen) if it "
                "must not train, or drop the no_grad");
  return has_grad_path_v<Loss, P>;
}
template <class Loss, class L>
consteval bool check_leaf_reached() {
  if constexpr (L::role == leaf_role::param) return check_param_reached<Loss, L>();
  else return true;
}
template <class Loss, class... Leaves>
consteval bool check_params_reached(tl::list<Leaves...>) {
  return (check_leaf_reached<Loss, Leaves>() & ... & true);
}
// Does each type occur once in the pack?
template <class T, class... Ts>
inline constexpr std::size_t occurrences = (std::size_t{std::is_same_v<T, Ts>} + ... + 0);
template <class... Ts>
consteval bool each_once() {
  return ((occurrences<Ts, Ts...> == 1) && ...);
}
}  // namespace detail

// value_and_grad(loss, wrt<W...>): a step computing the loss and the gradient
// of each W. All checks happen here, at compile time; the first mistake is
// reported alone.
template <expr Loss, class... Leaves>
constexpr auto value_and_grad(Loss, wrt_t<Leaves...>) {
  if constexpr (detail::holds_failed(topo_t<tl::list<Loss>>{})) {
    return invalid_step{};  // an op already reported a mistake
  } else if constexpr (!Loss::requires_grad) {
    static_assert(Loss::requires_grad,
                  "ctg: loss does not require grad: no trainable parameter reaches it "
                  "(frozen leaves, inputs and no_grad carry no gradient)");
    return invalid_step{};
  } else if constexpr (Loss::dims::rank != 0) {
    static_assert(Loss::dims::rank == 0, "ctg: loss must be a scalar (reduce it with ctg::sum or ctg::mean)");
    return invalid_step{};
  } else if constexpr (sizeof...(Leaves) == 0) {
    static_assert(sizeof...(Leaves) > 0, "ctg: value_and_grad needs at least one leaf in wrt<...>");
    return invalid_step{};
  } else if constexpr (!detail::each_once<Leaves...>()) {
    static_assert(detail::each_once<Leaves...>(),
                  "ctg: a leaf is named twice in wrt<...>: it is one parameter, with one gradient, and an optimizer "
                  "would update it once per mention (tied weights are one leaf: name it once)");
    return invalid_step{};
  } else if constexpr ((detail::check_wrt_leaf<Loss, Leaves>() & ...)) {
    return graph_step<node_t<Loss>, tl::list<Leaves...>>{};
  } else {
    return invalid_step{};
  }
}

// value_and_grad(loss): with respect to every trainable parameter the loss reaches.
template <expr Loss>
constexpr auto value_and_grad(Loss loss) {
  using fwd = topo_t<tl::list<Loss>>;
  if constexpr (detail::holds_failed(fwd{})) return invalid_step{};  // an op already reported a mistake
  else if constexpr (!detail::check_params_reached<Loss>(leaves_t<fwd>{})) return invalid_step{};
  else return []<class... Ps>(Loss l, tl::list<Ps...>) { return value_and_grad(l, wrt<Ps...>); }(loss, params_t<Loss>{});
}

}  // namespace ctg

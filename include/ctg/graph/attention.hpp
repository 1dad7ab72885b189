#pragma once
// causal_attention(q, k, v): softmax(q k^T / sqrt(Dh), causally masked) v,
// per head, as fused nodes that never hold the [T, T] scores (flash
// attention's algorithm). Three nodes:
//   attention_lse   each query's log-sum-exp of its scaled, masked scores
//                   (in the compute type: f32, f64 for f64)
//   attention       the output, o_i = sum_{j <= i} p_ij v_j / sum_{j <= i} p_ij,
//                   p_ij = exp(s_ij - lse_i), rounded once. The sum is 1 but
//                   for lse's rounding (|lse| 2^-24 in f32), which would
//                   scale a row's output and delta_i alike and leave
//                   sum_j ds_ij = -delta_i (|lse| 2^-24) in place of 0: with
//                   large scores, dq and dk lost digits (flash attention
//                   divides by the sum too)
//   attention_grad  dq, dk and dv in one buffer (three values of q's shape,
//                   each read through a view, attention_grad_part), from q,
//                   k, v, lse, the output's gradient g and
//                   delta_i = sum_d g_id o_id (an ordinary reduction):
//                   ds_ij = p_ij (g_i . v_j - delta_i), dq_i = scale sum_j
//                   ds_ij k_j, dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij g_i.
// So forward keeps q, k, v, the output and one number a query; backward
// computes the scores again, tile by tile.
//
// Layouts: token_rows, each head a [T, Dh] matrix (PyTorch's
// scaled_dot_product_attention); feature_rows, each head [Dh, T] (how
// nn::causal_self_attention computes its heads: transposed, no permute).
// q, k and v have one shape [..., H, T, Dh] (or [..., H, Dh, T]), one element
// type (f32, f64, bf16 or f16) and a static head dim; the output has theirs.
#include <ctg/graph/ops.hpp>

namespace ctg {

enum class attention_layout { token_rows, feature_rows };
// Which of the three nodes: lse, the output, the gradients.
enum class attention_pass { lse, output, grad };

namespace detail {
// The axis of a head's features, counted from the end (1: the last).
template <attention_layout L>
inline constexpr std::size_t feature_axis_from_end = L == attention_layout::token_rows ? 1 : 2;

// q's dims with the feature axis 1: one value a query (lse, delta).
template <class Dims, attention_layout L>
consteval shape_value attention_stat_shape() {
  shape_value v = value_of<Dims>();
  v.d[v.rank - feature_axis_from_end<L>] = 1;
  return v;
}
}  // namespace detail

// Each query's log-sum-exp of its scaled, causally masked scores.
template <attention_layout L, class Q, class K>
struct attention_lse_node {
  using ctg_node = void;
  using dtype = compute_t<typename Q::dtype>;
  using dims = shape_from<detail::attention_stat_shape<typename Q::dims, L>()>;
  using children = tl::list<Q, K>;
  static constexpr node_kind kind = node_kind::attention;
  static constexpr attention_layout layout = L;
  static constexpr attention_pass pass = attention_pass::lse;
  static constexpr bool requires_grad = false;  // (the output's rule gives q and k their whole gradient)
};

// The attention's output, from q, k, v and the lse node over q and k.
template <attention_layout L, class Q, class K, class V, class Lse>
struct attention_node {
  using ctg_node = void;
  using dtype = typename Q::dtype;
  using dims = typename Q::dims;
  using children = tl::list<Q, K, V, Lse>;
  static constexpr node_kind kind = node_kind::attention;
  static constexpr attention_layout layout = L;
  static constexpr attention_pass pass = attention_pass::output;
  static constexpr bool requires_grad = detail::any_requires_grad<Q, K, V>;
};

// dq, dk and dv, one after another in one buffer, each of q's shape.
template <attention_layout L, class Q, class K, class V, class Lse, class G, class Delta>
struct attention_grad_node {
  using ctg_node = void;
  using dtype = typename Q::dtype;
  using dims = typename Q::dims;
  using children = tl::list<Q, K, V, Lse, G, Delta>;
  static constexpr node_kind kind = node_kind::attention;
  static constexpr attention_layout layout = L;
  static constexpr attention_pass pass = attention_pass::grad;
  static constexpr std::size_t values = 3;
  static constexpr bool requires_grad = false;
};

// Value I (0: dq, 1: dk, 2: dv) of an attention_grad node: a view.
template <class Grad, std::size_t I>
struct attention_grad_part_node {
  using ctg_node = void;
  using dtype = typename Grad::dtype;
  using dims = typename Grad::dims;
  using children = tl::list<Grad>;
  static constexpr node_kind kind = node_kind::view;
  static constexpr std::size_t value_index = I;
  static constexpr bool requires_grad = false;
};

namespace detail {
template <class T>
inline constexpr bool attention_dtype = std::is_same_v<T, f32> || std::is_same_v<T, f64> ||
                                        std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// The checks, on the shapes and the element type alone (the note names them).
template <class QS, class KS, class VS, class T, class TK, class TV, attention_layout L>
consteval bool attention_fits() {
  constexpr bool same_type = std::is_same_v<T, TK> && std::is_same_v<T, TV>;
  static_assert(same_type && attention_dtype<T>,
                "ctg: causal_attention takes q, k and v of one element type, f32, f64, bf16 or f16");
  constexpr bool same_shape = std::is_same_v<QS, KS> && std::is_same_v<QS, VS> && QS::rank >= 2;
  static_assert(same_shape, "ctg: shape mismatch: causal_attention's q, k and v are each [..., T, Dh] "
                            "(feature_rows: [..., Dh, T]), of one shape");
  constexpr bool static_head = QS::rank >= 2 && QS::dims[QS::rank - feature_axis_from_end<L>] != dyn;
  static_assert(static_head, "ctg: causal_attention needs a static head dim Dh (the sequence may be ctg::dyn)");
  return same_type && attention_dtype<T> && same_shape && static_head;
}
}  // namespace detail

// softmax(q k^T / sqrt(Dh) + causal mask) v for each head (see the top of
// this file); feature_rows: each head's values transposed, [..., Dh, T].
template <attention_layout L = attention_layout::token_rows, expr Q, expr K, expr V>
constexpr auto causal_attention(Q, K, V) {
  if constexpr (detail::attention_fits<typename Q::dims, typename K::dims, typename V::dims, typename Q::dtype,
                                       typename K::dtype, typename V::dtype, L>()) {
    using lse = node_t<attention_lse_node<L, node_t<Q>, node_t<K>>>;
    return node_t<attention_node<L, node_t<Q>, node_t<K>, node_t<V>, lse>>{};
  } else {  // (reported above)
    return node_t<failed_node<typename Q::dims, typename Q::dtype, node_t<Q>, node_t<K>, node_t<V>>>{};
  }
}

}  // namespace ctg

#pragma once
// Causal multi-head self-attention over x [batch..., T, d], H heads of Dh.
//
// The projections are nn.Linear's weights: "<name>.wq", "<name>.wk" and
// "<name>.wv" are [H*Dh, d] (out, in), "<name>.wo" is [H*Dh, d] (in, out, as
// ctg's linear): y = concat_h(o_h) @ Wo. Every head's values are computed
// transposed, features along the rows: q^T = Wq @ x^T is one matmul giving
// [batch..., H*Dh, T], which is [batch..., H, Dh, T] unchanged in memory. So
// scores = (q_h^T)^T k_h^T and o_h^T = v_h^T probs_h^T are batched over heads
// with no permute, and the output projection is one matmul with K = H*Dh over
// [batch..., H*Dh, T] read transposed: no per-head products of width d to sum
// over heads, forward or backward.
//
// Scores are scaled by 1/sqrt(Dh), masked causally and passed through softmax
// in the stats type (f32); an optional additive mask (broadcastable to the
// scores [batch..., H, T, T]) is added before the softmax.
//
// With checkpointing::attention_scores nothing of the scores' size is kept
// for backward: q, k and v end checkpoint regions of their own (kept, a copy
// each, so their products are not computed again), and so do the heads'
// outputs; what lies between (the scores' product, the softmax loop writing
// the probabilities and their cast) is recomputed in backward from q and k,
// the heads' product with v not (backward does not read it: program.hpp).
#include <ctg/graph/attention.hpp>
#include <ctg/nn/linear.hpp>

namespace ctg::nn {
// How attention's heads are computed: composed, as the product of q and k,
// a softmax loop and the product with v (the [T, T] probabilities stored
// between); fused, by ctg::causal_attention (graph/attention.hpp), which
// stores one number a query instead.
enum class attention_kernel { composed, fused };
}  // namespace ctg::nn

namespace ctg::detail {
consteval double inv_sqrt(dim_t n) {
  double r = 1.0;  // Newton for sqrt(n), then invert
  for (int i = 0; i < 100; ++i) r = 0.5 * (r + static_cast<double>(n) / r);
  return 1.0 / r;
}

struct no_mask {};

// [..., F, T] <-> [..., F / Dh, Dh, T]: features F = H*Dh as H heads' rows, one head after another.
template <class S, dim_t HeadDim>
consteval shape_value heads_split() {
  shape_value v;
  for (std::size_t i = 0; i + 2 < S::rank; ++i) v.d[v.rank++] = S::dims[i];
  v.d[v.rank++] = S::dims[S::rank - 2] / HeadDim;
  v.d[v.rank++] = HeadDim;
  v.d[v.rank++] = S::dims[S::rank - 1];
  return v;
}
template <class S>
consteval shape_value heads_joined() {
  shape_value v;
  for (std::size_t i = 0; i + 3 < S::rank; ++i) v.d[v.rank++] = S::dims[i];
  v.d[v.rank++] = S::dims[S::rank - 3] * S::dims[S::rank - 2];
  v.d[v.rank++] = S::dims[S::rank - 1];
  return v;
}

template <class X, class Wq, class Wk, class Wv, class Wo, dim_t Heads, dim_t HeadDim>
consteval bool attention_weights_fit() {
  constexpr dim_t d = X::dims::dims[X::dims::rank - 1];
  constexpr auto is = [](auto w) {
    using W = decltype(w);
    return W::dims::rank == 2 && W::dims::dims[0] == Heads * HeadDim && W::dims::dims[1] == d;
  };
  constexpr bool ok = HeadDim > 0 && is(Wq{}) && is(Wk{}) && is(Wv{}) && is(Wo{});
  static_assert(ok, "ctg: shape mismatch: attention's weights wq, wk, wv and wo are each [H*Dh, d] for H heads "
                    "of Dh (nn.Linear's layout; x is [..., T, d])");
  return ok;
}

template <precision::policy P, dim_t HeadDim, checkpointing Ckpt, nn::attention_kernel Kernel, expr X, expr Wq,
          expr Wk, expr Wv, expr Wo, class Mask>
constexpr auto attention(X x, Wq wq, Wk wk, Wv wv, Wo wo, Mask) {
  using S = typename P::stats_type;
  auto per_head = [](auto t) {  // [..., H*Dh, T] -> [..., H, Dh, T]
    return reshape<shape_from<heads_split<typename decltype(t)::dims, HeadDim>()>>(t);
  };
  auto kept = [](auto t) {  // the end of a checkpoint region (attention_scores)
    if constexpr (Ckpt == checkpointing::attention_scores) return checkpoint(t);
    else return t;
  };
  auto heads_out = [&] {  // [..., H, Dh, T]
    if constexpr (Kernel == nn::attention_kernel::fused) {
      // Nothing of the scores' size exists: nothing to recompute, so no region ends here.
      auto q_t = per_head(precision::weight_times_transposed<P>(wq, x));
      auto k_t = per_head(precision::weight_times_transposed<P>(wk, x));
      auto v_t = per_head(precision::weight_times_transposed<P>(wv, x));
      return causal_attention<attention_layout::feature_rows>(q_t, k_t, v_t);
    } else {
      auto q_t = kept(per_head(precision::weight_times_transposed<P>(wq, x)));
      auto k_t = kept(per_head(precision::weight_times_transposed<P>(wk, x)));
      auto v_t = kept(per_head(precision::weight_times_transposed<P>(wv, x)));
      // Products of two activations: in the matmul type under every policy (not FP8).
      auto scores = cast<S>(matmul(transpose(q_t), k_t)) * lit<inv_sqrt(HeadDim)>;  // [..., H, T, T]
      auto probs = [&] {
        if constexpr (std::is_same_v<Mask, no_mask>) return softmax(causal_mask(scores));
        else return softmax(causal_mask(scores + cast<S>(Mask{})));
      }();
      return kept(matmul(v_t, transpose(precision::for_matmul<P>(probs))));
    }
  };
  auto o_t = heads_out();
  auto concat_t = reshape<shape_from<heads_joined<typename decltype(o_t)::dims>()>>(o_t);  // [..., H*Dh, T]
  return nn::linear<P>(transpose(concat_t), wo);  // [..., T, d]
}
}  // namespace ctg::detail

namespace ctg::nn {
// With the weights given as expressions (each [H*Dh, d], see the top of this
// file). Ckpt: checkpointing::attention_scores recomputes the scores'
// values in backward (above); any other keeps them. Kernel: fused computes
// each head's attention with ctg::causal_attention (nothing of the
// scores' size is ever stored, so Ckpt changes nothing here).
template <dim_t Heads, precision::policy P, checkpointing Ckpt = checkpointing::none,
          attention_kernel Kernel = attention_kernel::composed, expr X, expr Wq, expr Wk, expr Wv, expr Wo>
constexpr auto causal_self_attention(X x, Wq wq, Wk wk, Wv wv, Wo wo) {
  constexpr dim_t head_dim = Heads > 0 ? Wq::dims::dims[0] / Heads : 0;
  if constexpr (detail::attention_weights_fit<X, Wq, Wk, Wv, Wo, Heads, head_dim>())
    return detail::attention<P, head_dim, Ckpt, Kernel>(x, wq, wk, wv, wo, detail::no_mask{});
  else  // (reported above)
    return node_t<failed_node<typename X::dims, typename P::matmul_type, node_t<X>>>{};
}

// Named parameters, with an additive mask expression added to the scores (below: without).
template <fixed_string Name, dim_t Heads, dim_t HeadDim, precision::policy P,
          checkpointing Ckpt = checkpointing::none, expr X, class Mask>
constexpr auto causal_self_attention_masked(X x, Mask mask) {
  constexpr dim_t d = X::dims::dims[X::dims::rank - 1];
  using T = typename P::param_type;
  constexpr dim_t features = Heads * HeadDim;
  return detail::attention<P, HeadDim, Ckpt, attention_kernel::composed>(
      x, param<Name + ".wq", T, features, d>{}, param<Name + ".wk", T, features, d>{},
      param<Name + ".wv", T, features, d>{}, param<Name + ".wo", T, features, d>{}, mask);
}

template <fixed_string Name, dim_t Heads, dim_t HeadDim, precision::policy P,
          checkpointing Ckpt = checkpointing::none, attention_kernel Kernel = attention_kernel::composed, expr X>
constexpr auto causal_self_attention(X x) {
  constexpr dim_t d = X::dims::dims[X::dims::rank - 1];
  using T = typename P::param_type;
  constexpr dim_t features = Heads * HeadDim;
  return detail::attention<P, HeadDim, Ckpt, Kernel>(
      x, param<Name + ".wq", T, features, d>{}, param<Name + ".wk", T, features, d>{},
      param<Name + ".wv", T, features, d>{}, param<Name + ".wo", T, features, d>{}, detail::no_mask{});
}

}  // namespace ctg::nn

#pragma once
// Causal multi-head self-attention over x [batch..., T, d].
//
// Per-head projections are parameters of shape [H, d, Dh] ("<name>.wq",
// "<name>.wk", "<name>.wv") and [H, Dh, d] ("<name>.wo"). With x viewed as
// [batch..., 1, T, d], q = x @ Wq is one batched matmul giving [batch..., H, T, Dh];
// the output projection sums the heads: y = sum_h o_h @ Wo_h, which equals the
// usual concat(o_h) @ Wo with Wo split by heads. No reshape or permute needed.
//
// Scores are scaled by 1/sqrt(Dh), masked causally and passed through softmax
// in the stats type (f32); an optional additive mask (broadcastable to the
// scores [batch..., H, T, T]) is added before the softmax.
#include <ctg/nn/linear.hpp>

namespace ctg::nn {

}  // namespace ctg::nn

namespace ctg::detail {
consteval double inv_sqrt(dim_t n) {
  double r = 1.0;  // Newton for sqrt(n), then invert
  for (int i = 0; i < 100; ++i) r = 0.5 * (r + static_cast<double>(n) / r);
  return 1.0 / r;
}

struct no_mask {};

template <precision::policy P, dim_t HeadDim, expr X, expr Wq, expr Wk, expr Wv, expr Wo, class Mask>
constexpr auto attention(X x, Wq wq, Wk wk, Wv wv, Wo wo, Mask) {
  using S = typename P::stats_type;
  auto xh = unsqueeze<-3>(precision::for_matmul<P>(x));  // [..., 1, T, d]
  auto q = nn::linear<P>(xh, wq);  // [..., H, T, Dh]
  auto k = nn::linear<P>(xh, wk);
  auto v = nn::linear<P>(xh, wv);
  // Products of two activations: in the matmul type under every policy (not FP8).
  auto scores = cast<S>(matmul(q, transpose(k))) * lit<inv_sqrt(HeadDim)>;  // [..., H, T, T]
  auto probs = [&] {
    if constexpr (std::is_same_v<Mask, no_mask>) return softmax(causal_mask(scores));
    else return softmax(causal_mask(scores + cast<S>(Mask{})));
  }();
  auto heads = nn::linear<P>(matmul(precision::for_matmul<P>(probs), v), wo);  // [..., H, T, d]
  return squeeze<-3>(sum<-3>(heads));                // [..., T, d]
}
}  // namespace ctg::detail

namespace ctg::nn {
template <precision::policy P, expr X, expr Wq, expr Wk, expr Wv, expr Wo>
constexpr auto causal_self_attention(X x, Wq wq, Wk wk, Wv wv, Wo wo) {
  return detail::attention<P, Wq::dims::dims[Wq::dims::rank - 1]>(x, wq, wk, wv, wo, detail::no_mask{});
}

// Named parameters, with an additive mask expression added to the scores (below: without).
template <fixed_string Name, dim_t Heads, dim_t HeadDim, precision::policy P, expr X, class Mask>
constexpr auto causal_self_attention_masked(X x, Mask mask) {
  constexpr dim_t d = X::dims::dims[X::dims::rank - 1];
  using T = typename P::param_type;
  return detail::attention<P, HeadDim>(x, param<Name + ".wq", T, Heads, d, HeadDim>{},
                                       param<Name + ".wk", T, Heads, d, HeadDim>{},
                                       param<Name + ".wv", T, Heads, d, HeadDim>{},
                                       param<Name + ".wo", T, Heads, HeadDim, d>{}, mask);
}


template <fixed_string Name, dim_t Heads, dim_t HeadDim, precision::policy P, expr X>
constexpr auto causal_self_attention(X x) {
  return causal_self_attention_masked<Name, Heads, HeadDim, P>(x, detail::no_mask{});
}

}  // namespace ctg::nn

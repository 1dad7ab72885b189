#pragma once
// linear: y = x @ W (+ b), W of shape [in, out]. Operands in the policy's
// matmul type (under precision::fp8, a leaf W is multiplied in FP8: see
// precision/fp8_policy.hpp); parameters named "<name>.weight" and "<name>.bias".
#include <ctg/precision/fp8_policy.hpp>

namespace ctg::nn {

// With the weight (and bias) given as expressions: any leaf, frozen or not, or a computed value.
template <precision::policy P, expr X, expr W>
constexpr auto linear(X x, W w) {
  return precision::weight_matmul<P>(x, w);
}
template <precision::policy P, expr X, expr W, expr B>
constexpr auto linear(X x, W w, B b) {
  return linear<P>(x, w) + precision::for_matmul<P>(b);
}

enum class bias { none, with };

// Named parameters: linear<"mlp.up", 256, P>(x) declares "mlp.up.weight" [in, 256].
template <fixed_string Name, dim_t Out, precision::policy P, bias Bias = bias::none,
          leaf_role Role = leaf_role::param, expr X>
constexpr auto linear(X x) {
  constexpr dim_t in = X::dims::dims[X::dims::rank - 1];
  static_assert(in != dyn, "ctg: linear needs a static last dim (the input features)");
  using W = leaf_node<Name + ".weight", typename P::param_type, Role, in, Out>;
  if constexpr (Bias == bias::with)
    return linear<P>(x, W{}, leaf_node<Name + ".bias", typename P::param_type, Role, Out>{});
  else return linear<P>(x, W{});
}

}  // namespace ctg::nn

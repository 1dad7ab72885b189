#pragma once
// SwiGLU feed-forward: (silu(x @ W1) * (x @ W3)) @ W2, no biases.
// Parameters "<name>.w1", "<name>.w3" [d, hidden] and "<name>.w2" [hidden, d].
#include <ctg/nn/linear.hpp>

namespace ctg::nn {

template <precision::policy P, expr X, expr W1, expr W3, expr W2>
constexpr auto swiglu(X x, W1 w1, W3 w3, W2 w2) {
  return linear<P>(silu(linear<P>(x, w1)) * linear<P>(x, w3), w2);
}
template <fixed_string Name, dim_t Hidden, precision::policy P, expr X>
constexpr auto swiglu(X x) {
  constexpr dim_t d = X::dims::dims[X::dims::rank - 1];
  using T = typename P::param_type;
  return swiglu<P>(x, param<Name + ".w1", T, d, Hidden>{}, param<Name + ".w3", T, d, Hidden>{},
                   param<Name + ".w2", T, Hidden, d>{});
}

}  // namespace ctg::nn

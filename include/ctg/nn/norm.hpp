#pragma once
// rms_norm and layer_norm over the last dim. The statistics are computed in
// the policy's stats type (f32 for every narrow activation type): the input is
// cast first, and since a cast keeps the gradient (B2) nothing is lost.
// Outputs are in the stats type. Parameters: "<name>.scale" (initialised to 1)
// and, for layer_norm, "<name>.bias".
#include <ctg/precision/policy.hpp>

namespace ctg::detail {
template <class X>
inline constexpr dim_t features = X::dims::dims[X::dims::rank - 1];
}  // namespace ctg::detail

namespace ctg::nn {

// x / sqrt(mean(x^2) + eps) * scale
template <precision::policy P, double Eps = 1e-5, expr X, expr Scale>
constexpr auto rms_norm(X x, Scale scale) {
  auto xs = precision::for_stats<P>(x);
  return xs * rsqrt(mean<-1>(square(xs)) + lit<Eps>) * precision::for_stats<P>(scale);
}
template <fixed_string Name, precision::policy P, double Eps = 1e-5, expr X>
constexpr auto rms_norm(X x) {
  return rms_norm<P, Eps>(x, param<Name + ".scale", typename P::param_type, detail::features<X>>{});
}

// (x - mean) / sqrt(var + eps) * scale + bias, with the biased variance (as PyTorch).
template <precision::policy P, double Eps = 1e-5, expr X, expr Scale, expr Bias>
constexpr auto layer_norm(X x, Scale scale, Bias bias) {
  auto xs = precision::for_stats<P>(x);
  auto centred = xs - mean<-1>(xs);
  return centred * rsqrt(mean<-1>(square(centred)) + lit<Eps>) * precision::for_stats<P>(scale) +
         precision::for_stats<P>(bias);
}
template <fixed_string Name, precision::policy P, double Eps = 1e-5, expr X>
constexpr auto layer_norm(X x) {
  using T = typename P::param_type;
  return layer_norm<P, Eps>(x, param<Name + ".scale", T, detail::features<X>>{},
                            param<Name + ".bias", T, detail::features<X>>{});
}

}  // namespace ctg::nn

#pragma once
// The FP8 training policy: autocast<Compute> plus FP8 weight products.
//
//   fp8<Recipe, Compute = bf16>
//       master parameters in f32; norms, softmax and the loss in f32; every
//       product of an activation with a parameter leaf (linear layers,
//       attention projections, SwiGLU, lm_head) runs in FP8: the activation
//       and the weight quantized to the recipe's forward format, the
//       incoming gradient in backward to its gradient format (e4m3 and e5m2
//       under precision::hybrid, the default), the exact fp8 values
//       multiplied with f32 accumulation, the result in Compute. Products of
//       two activations (attention's q k^T and probs v) stay in Compute, as
//       in TransformerEngine without FP8 attention.
//
// Recipe is precision::delayed<History, Margin, Algo, Formats> or
// precision::current<Margin, Formats> (fp8_scaling.hpp). Under delayed
// scaling each weight "<w>" has three scaling states in the store, named
// after it and saved with the parameters:
//   "<w>.fp8_input", "<w>.fp8_weight", "<w>.fp8_grad"   (each ".scale" and ".amax_history")
// Inside nn::stack they are per layer like the weight ("layers.{i}.attn.wq.fp8_input.scale").
// A weight used in several products (tied, shared) keeps these three states:
// each is updated once per step from the max of the amaxes of all its uses
// (exec/fp8_state.hpp).
#include <ctg/graph/fp8.hpp>
#include <ctg/precision/fp8_scaling.hpp>
#include <ctg/precision/policy.hpp>

namespace ctg::precision {

template <class Recipe = delayed<>, class Compute = bf16>
struct fp8 {
  static_assert(std::is_same_v<Compute, bf16> || std::is_same_v<Compute, f16> || std::is_same_v<Compute, f32>,
                "ctg: fp8<Recipe, Compute> computes in bf16, f16 or f32");
  using param_type = f32;
  using matmul_type = Compute;
  using stats_type = f32;
  using recipe = Recipe;
};

// sharded<P>: policy P for a model whose weights are held in dim-0 shards
// (dist::data_parallel). Under an fp8 policy each weight product quantizes
// the whole weight, then shards the quantized tensor (seed B3's right
// order: shard(quantize(w)), whose fp8 bytes are what ranks gather); under
// any other policy it is P.
template <class P>
struct sharded : P {
  using unsharded = P;
};

template <class P>
inline constexpr bool is_fp8_policy_v = false;
template <class Recipe, class Compute>
inline constexpr bool is_fp8_policy_v<fp8<Recipe, Compute>> = true;
template <class P>
inline constexpr bool is_fp8_policy_v<sharded<P>> = is_fp8_policy_v<P>;
template <class P>
inline constexpr bool shards_weights_v = false;
template <class P>
inline constexpr bool shards_weights_v<sharded<P>> = true;

}  // namespace ctg::precision

namespace ctg::detail {
template <class Recipe>
inline constexpr bool is_delayed_recipe_v = false;
template <std::size_t H, int M, precision::amax_algo A, class F>
inline constexpr bool is_delayed_recipe_v<precision::delayed<H, M, A, F>> = true;

// The scaling of one fp8 tensor named Name under Recipe.
template <class Recipe, fixed_string Name>
using scaling_for = std::conditional_t<is_delayed_recipe_v<Recipe>, scaling::delayed<Name, Recipe>,
                                       scaling::current<Recipe>>;

// x @ w (WeightFirst: w @ x^T) under policy P: see weight_matmul below.
template <precision::policy P, bool WeightFirst, expr X, expr W>
constexpr auto weight_product(X x, W w) {
  using precision::for_matmul;
  if constexpr (precision::is_fp8_policy_v<P> && is_leaf_v<W>) {
    using R = typename P::recipe;
    constexpr auto name = W::name;
    using F = typename R::formats::forward;
    auto xq = quantize<F, scaling_for<R, name + ".fp8_input">>(for_matmul<P>(x));
    auto wq = [&] {
      using S = scaling_for<R, name + ".fp8_weight">;
      if constexpr (precision::shards_weights_v<P> && !sees_a_shard<node_t<W>>())
        return node_t<quantize_node<F, node_t<W>, S, true>>{};  // shard(quantize(w))
      else return quantize<F, S>(w);  // (of a sharded leaf: "ctg: quantize before shard", the policy shards it)
    }();
    using out = typename P::matmul_type;
    using grad_scaling = scaling_for<R, name + ".fp8_grad">;
    if constexpr (WeightFirst) return fp8_matmul<out, grad_scaling, false, true>(wq, xq);
    else return fp8_matmul<out, grad_scaling>(xq, wq);
  } else {
    if constexpr (WeightFirst) return matmul(for_matmul<P>(w), transpose(for_matmul<P>(x)));
    else return matmul(for_matmul<P>(x), for_matmul<P>(w));
  }
}
}  // namespace ctg::detail

namespace ctg::precision {
// x @ w for an activation x and a weight w under policy P: in FP8 when P is
// an fp8 policy and w a leaf (its name keys the scaling state), otherwise
// both operands cast to P's matmul type.
template <policy P, expr X, expr W>
constexpr auto weight_matmul(X x, W w) {
  return detail::weight_product<P, false>(x, w);
}

// w @ x^T for a weight w [out, in] (nn.Linear's layout) and an activation
// x [..., T, in]: [..., out, T], the output features along the rows (x is read
// transposed where it lies). In FP8 as weight_matmul.
template <policy P, expr W, expr X>
constexpr auto weight_times_transposed(W w, X x) {
  return detail::weight_product<P, true>(x, w);
}

}  // namespace ctg::precision

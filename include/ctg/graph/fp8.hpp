#pragma once
// FP8 tensors. An fp8 value is a pair (payload, f32 scale), real = payload /
// scale (DESIGN section 3): `quantize` makes one from a tensor, `fp8_matmul`
// multiplies the exact fp8 payloads with f32 accumulation and applies both
// scale_invs once, `dequantize` turns one back into a wider type. An fp8 node
// used anywhere else (arithmetic, cast) does not compile: "ctg: fp8 needs a
// scale".
//
// Scaling (per tensor), a type parameter of quantize:
//   scaling::delayed<Name, precision::delayed<H, Margin, Algo>>
//       TransformerEngine's delayed scaling. The scale used in a step was
//       computed after the previous one; its state is two leaves in the
//       store: "<Name>.scale" (f32 [1], starts at 1) and
//       "<Name>.amax_history" (f32 [H], starts at 0), saved and loaded by
//       name with the parameters. The quantize loop also takes the tensor's
//       amax (same group); after a successful step, and only then, the
//       store writes it into history slot 0 and updates scale and history
//       (precision::delayed_update). A recompute reads the same scale and
//       records nothing, so it replays the forward exactly (B4).
//   scaling::current<precision::current<Margin>>
//       torchao's tensorwise scaling: the scale from this tensor's amax in
//       this step (the quantize group takes the amax, then casts). No state.
//
// Formats: a scaling's recipe fixes the formats of the products it takes part
// in (Recipe::formats: forward operands, gradient; precision/fp8_scaling.hpp);
// fp8_matmul checks its operands and its gradient scaling against them.
//
// Gradients: quantize and dequantize pass the gradient straight through, in
// the dtype the tensor was quantized from. fp8_matmul's backward quantizes
// the incoming gradient to its gradient scaling's format (e5m2 under HYBRID:
// e4m3 forward, e5m2 backward) and multiplies it with the saved fp8 operands. A frozen
// leaf quantized stays frozen: the node requires grad exactly when its input
// does (B1).
#include <ctg/graph/ops.hpp>
#include <ctg/graph/sharding.hpp>

namespace ctg {

namespace scaling {
template <fixed_string Name, class Recipe>
struct delayed {
  using recipe = Recipe;
  using scale_leaf = state_leaf<Name + ".scale", f32, 1.0, 1>;
  using history_leaf = state_leaf<Name + ".amax_history", f32, 0.0, static_cast<dim_t>(Recipe::history)>;
  using state = tl::list<scale_leaf, history_leaf>;
  static constexpr bool is_delayed = true;
  static constexpr int margin = Recipe::margin;
};
template <class Recipe>
struct current {
  using recipe = Recipe;
  using state = tl::list<>;
  static constexpr bool is_delayed = false;
  static constexpr int margin = Recipe::margin;
};
}  // namespace scaling

// The fp8 payload of X under Scaling, with its amax, scale and scale_inv.
// ShardedPayload: the payload is sharded after quantization (dist::shard of a
// quantized leaf, graph/sharding.hpp); the values are the same.
template <class Fmt, class X, class Scaling, bool ShardedPayload = false>
struct quantize_node {
  static_assert(is_fp8_v<Fmt>, "ctg: quantize makes e4m3 or e5m2 tensors");
  static_assert(element_type<typename X::dtype> && !is_fp8_v<typename X::dtype>,
                "ctg: quantize takes an f32, f64, bf16 or f16 tensor");
  using ctg_node = void;
  using dtype = Fmt;
  using grad_dtype = typename X::dtype;
  using dims = typename X::dims;
  using scaling = Scaling;
  using children = tl::concat_t<tl::list<X>, typename Scaling::state>;
  static constexpr node_kind kind = node_kind::quantize;
  static constexpr bool requires_grad = X::requires_grad;
  static constexpr replay state_replay = replay::exact;
  static constexpr float fp8_max = dtype_traits<Fmt>::max;  // 448 (e4m3), 57344 (e5m2)
  static constexpr bool sharded = ShardedPayload;
};

// Q's real values as T.
template <class T, class Q>
struct dequantize_node {
  using ctg_node = void;
  using dtype = T;
  using dims = typename Q::dims;
  using children = tl::list<Q>;
  static constexpr node_kind kind = node_kind::dequantize;
  static constexpr bool requires_grad = Q::requires_grad;
};

// op(A) @ op(B), op = transpose where TA / TB: fp8 payloads multiplied exactly
// and summed in f32, times scale_inv(A) * scale_inv(B), rounded once to Out.
// GradScaling quantizes the incoming gradient in backward (void: no backward).
// SumBatches (a backward product: the gradient of a weight the forward
// product broadcasts over batches, as matmul_node's): the sum of the
// batches' products, [M, N] in f32, with no [batch, M, N] partial products
// rounded to Out.
template <class A, class B, bool TA, bool TB, class Out, class GradScaling, bool SumBatches = false>
struct fp8_matmul_node {
  static_assert(A::kind == node_kind::quantize && B::kind == node_kind::quantize,
                "ctg: fp8_matmul multiplies quantized tensors (ctg::quantize)");
  using ctg_node = void;
  using dtype = std::conditional_t<SumBatches, compute_t<Out>, Out>;
  using dims = shape_from<detail::matmul_shape<A, B, TA, TB, SumBatches>()>;
  using children = tl::list<A, B>;
  static constexpr node_kind kind = node_kind::fp8_matmul;
  static constexpr bool requires_grad = A::requires_grad || B::requires_grad;
  static constexpr bool transpose_a = TA, transpose_b = TB, sum_batches = SumBatches;
};

// quantize<Fmt, Scaling>(x): x as an fp8 tensor (see the top of this file).
// Quantizing a sharded leaf is the B3 ordering bug (graph/sharding.hpp).
// Each mistake is reported once: the result is then a failed node, which
// the ops that read it report no more.
template <class Fmt, class Scaling, expr X>
constexpr auto quantize(X) {
  constexpr bool reported = X::kind == node_kind::failed;
  constexpr bool fp8_format = is_fp8_v<Fmt>;
  static_assert(fp8_format, "ctg: quantize makes e4m3 or e5m2 tensors");
  constexpr bool quantizable = reported || !fp8_format ||
                               (element_type<typename X::dtype> && !is_fp8_v<typename X::dtype>);
  static_assert(quantizable, "ctg: quantize takes an f32, f64, bf16 or f16 tensor");
  constexpr bool after_shard = !reported && fp8_format && quantizable && detail::sees_a_shard<X>();
  static_assert(!after_shard,
                "ctg: quantize before shard: this quantizer reads a sharded leaf, so each rank would scale by the "
                "amax of its own slice; quantize the whole leaf, then shard the quantized tensor: "
                "dist::shard(quantize<Fmt, Scaling>(w)) (a policy's weight_matmul takes the unsharded leaf: under "
                "precision::sharded<fp8<...>> it quantizes, then shards)");
  if constexpr (reported || !fp8_format || !quantizable || after_shard)
    return node_t<failed_node<typename X::dims, Fmt, node_t<X>>>{};
  else
    return node_t<quantize_node<Fmt, node_t<X>, Scaling>>{};
}
// dequantize<T>(q): the real values of fp8 tensor q, as T.
template <class T, expr Q>
constexpr auto dequantize(Q) {
  constexpr bool quantized = Q::kind == node_kind::quantize || Q::kind == node_kind::failed;
  static_assert(quantized, "ctg: dequantize takes a quantized tensor (ctg::quantize)");
  if constexpr (Q::kind != node_kind::quantize) return node_t<failed_node<typename Q::dims, T, node_t<Q>>>{};
  else return node_t<dequantize_node<T, node_t<Q>>>{};
}
namespace detail {
// The formats of one product follow its recipes (precision/fp8_scaling.hpp):
// each operand in its recipe's forward format, and the gradient's recipe of
// the same formats as the operands' (so the gradient is quantized to the
// format they say). The first mistake is reported alone; the note above it
// names the format and the recipe.
template <class Fmt, class Recipe>
consteval bool fp8_operand_format() {
  constexpr bool ok = std::is_same_v<Fmt, typename Recipe::formats::forward>;
  static_assert(ok, "ctg: fp8 format: an fp8_matmul operand is not in its recipe's forward format (Fmt and "
                    "Recipe in the note above; precision::hybrid and all_e4m3 quantize operands to e4m3)");
  return ok;
}
template <class OperandRecipe, class GradientRecipe>
consteval bool fp8_gradient_format() {
  constexpr bool ok = std::is_same_v<typename OperandRecipe::formats, typename GradientRecipe::formats>;
  static_assert(ok, "ctg: fp8 format: the gradient's recipe has other formats than the operands' (the note "
                    "above names both recipes): the gradient would be quantized to another format than the "
                    "product's recipe says");
  return ok;
}
template <class A, class B, class GradScaling>
consteval bool fp8_formats_follow_recipes() {
  using RA = typename A::scaling::recipe;
  using RB = typename B::scaling::recipe;
  if constexpr (!fp8_operand_format<typename A::dtype, RA>()) return false;
  else if constexpr (!fp8_operand_format<typename B::dtype, RB>()) return false;
  else if constexpr (std::is_void_v<GradScaling>) return true;
  else if constexpr (!fp8_gradient_format<RA, typename GradScaling::recipe>()) return false;
  else return fp8_gradient_format<RB, typename GradScaling::recipe>();
}
}  // namespace detail

// fp8_matmul<Out, GradScaling>(a, b): a @ b for quantized a and b, the result
// in Out; fp8_matmul<Out, GradScaling, TA, TB> multiplies op(a) op(b), op
// transposing the last two dims where TA / TB (a transposed operand is read
// where it lies). Their formats must follow their recipes
// (detail::fp8_formats_follow_recipes).
template <class Out, class GradScaling, bool TA = false, bool TB = false, expr A, expr B>
constexpr auto fp8_matmul(A, B) {
  constexpr bool reported = A::kind == node_kind::failed || B::kind == node_kind::failed;
  constexpr bool quantized = reported || (A::kind == node_kind::quantize && B::kind == node_kind::quantize);
  static_assert(quantized, "ctg: fp8_matmul multiplies quantized tensors (ctg::quantize)");
  constexpr bool shapes_agree = reported || !quantized || detail::matmul_shape<A, B, TA, TB>().ok;
  static_assert(shapes_agree, "ctg: shape mismatch: matmul inner dims (or batch dims) do not agree");
  using failed = node_t<failed_node<shape_from<detail::matmul_shape<A, B, TA, TB>()>, Out, node_t<A>, node_t<B>>>;
  if constexpr (reported || !quantized || !shapes_agree) return failed{};
  else if constexpr (!detail::fp8_formats_follow_recipes<A, B, GradScaling>()) return failed{};
  else return node_t<fp8_matmul_node<node_t<A>, node_t<B>, TA, TB, Out, GradScaling>>{};
}

}  // namespace ctg

#pragma once
// The code every backend runs: the element functors of elementwise nodes,
// the reduction functors, and dropout's mask value. All are CTG_HD, so the CPU
// loops and the CUDA kernels inline the same functions and agree bit for bit.
//
// Each element functor states how a gradient crosses it, as
// `static constexpr ctg::grad gradient`:
//   grad::rule  its backward rule is in graph/rules.hpp (a functor declared
//               so without a rule there is a compile error, never a silent
//               identity gradient);
//   grad::pass  the gradient passes through unchanged (autodiff casts it to
//               the child's dtype and sums it down to the child's shape);
//   grad::none  no gradient flows through it: a node of it never requires
//               grad (derivative zero almost everywhere, or by definition).
// and its name, `static constexpr const char* name` (the op as a drawing of
// the graph shows it: lower/describe.hpp). Reduction functors have one too.
#include <cstdint>
#include <type_traits>

#include <ctg/core/config.hpp>
#include <ctg/core/dtypes.hpp>
#include <ctg/core/math.hpp>
#include <ctg/core/philox.hpp>
#include <ctg/core/shape.hpp>

CTG_HOT_BEGIN

namespace ctg {

enum class grad { rule, pass, none };

// What a random node's values depend on besides its element index: the
// store's seed, the step count, and the layer (inside ctg::nn::stack).
struct random_key {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;  // (64-bit: a 32-bit count wrapped, and masks repeated, after 2^32 runs)
  std::uint32_t layer = 0;
};

// Dropout's mask value of element `index` on random stream `stream` (a name's
// hash; each stacked layer gets its own stream): 1/(1-P) in C (f32, or f64
// for f64 values) where kept, 0 where dropped (probability P).
// In f32, 1/(1-P) is PyTorch's: the reciprocal of 1-P rounded to f32
// (1/(1-P) rounded once differed by an ulp for about a quarter of P values,
// 0.15 among them).
template <double P, class C = float>
CTG_HD CTG_FORCEINLINE C dropout_value(const random_key& k, std::uint32_t stream, std::uint64_t index) {
  const float u = philox_uniform(k.seed, k.step, stream + 0x9E3779B9u * k.layer, index);
  constexpr double keep = std::is_same_v<C, double> ? 1.0 - P : static_cast<double>(static_cast<float>(1.0 - P));
  return u >= static_cast<float>(P) ? static_cast<C>(1.0 / keep) : C(0);
}

// Element functors: `apply` over compute values (float or double).
namespace op {
#define CTG_UNARY_OP(NAME, GRAD, EXPR)                          \
  struct NAME {                                                 \
    static constexpr grad gradient = grad::GRAD;                \
    static constexpr const char* name = #NAME;                  \
    template <class C>                                          \
    CTG_HD static CTG_FORCEINLINE C apply(C x) { return EXPR; } \
  };
CTG_UNARY_OP(neg, rule, -x)
CTG_UNARY_OP(exp, rule, math::exp(x))
CTG_UNARY_OP(log, rule, math::log(x))
CTG_UNARY_OP(sqrt, rule, math::sqrt(x))
CTG_UNARY_OP(rsqrt, rule, C(1) / math::sqrt(x))
CTG_UNARY_OP(square, rule, x* x)
CTG_UNARY_OP(abs, rule, math::abs(x))
// relu passes a NaN on (!(x <= 0)), as PyTorch: a NaN before it reaches the loss.
CTG_UNARY_OP(relu, rule, !(x <= C(0)) ? x : C(0))
CTG_UNARY_OP(sigmoid, rule, math::sigmoid(x))
CTG_UNARY_OP(tanh, rule, math::tanh(x))
CTG_UNARY_OP(silu, rule, x* math::sigmoid(x))
// gelu with the exact erf form (PyTorch's default).
CTG_UNARY_OP(gelu, rule, C(0.5) * x * (C(1) + math::erf(x * C(0.70710678118654752440))))
// Derivatives that backward rules use. sign and step are zero almost
// everywhere; step is relu's, 1 at NaN (PyTorch's relu passes the gradient
// there).
CTG_UNARY_OP(sign, none, x > C(0) ? C(1) : (x < C(0) ? C(-1) : C(0)))
CTG_UNARY_OP(step, none, !(x <= C(0)) ? C(1) : C(0))
CTG_UNARY_OP(silu_grad, rule, math::sigmoid(x) * (C(1) + x * (C(1) - math::sigmoid(x))))
CTG_UNARY_OP(gelu_grad, rule,
             C(0.5) * (C(1) + math::erf(x * C(0.70710678118654752440))) +
                 x * C(0.39894228040143267794) * math::exp(C(-0.5) * x * x))
#undef CTG_UNARY_OP

#define CTG_BINARY_OP(NAME, GRAD, EXPR)                                \
  struct NAME {                                                        \
    static constexpr grad gradient = grad::GRAD;                       \
    static constexpr const char* name = #NAME;                         \
    template <class C>                                                 \
    CTG_HD static CTG_FORCEINLINE C apply(C a, C b) { return EXPR; }   \
  };
CTG_BINARY_OP(add, rule, a + b)
CTG_BINARY_OP(sub, rule, a - b)
CTG_BINARY_OP(mul, rule, a* b)
CTG_BINARY_OP(div, rule, a / b)
CTG_BINARY_OP(equal, none, a == b ? C(1) : C(0))
#undef CTG_BINARY_OP

// keep_where: a where m is not 0, else 0 (a select, not a product: a one-hot
// row picks a -inf log-probability's neighbours as 0, where -inf * 0 is
// NaN; nn::cross_entropy).
struct keep_where {
  static constexpr grad gradient = grad::rule;
  static constexpr const char* name = "keep_where";
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply(C a, C m) { return detail::select_value(m != C(0), a, C(0)); }
};

// div_by_count: a / max(b, 1), a sum over the kept elements divided by
// their count b (nn::cross_entropy's: a whole number, without gradient).
// Where none was kept (b = 0, a = 0) it is 0, and so is the gradient of a,
// where a / b would give every element's gradient 0 * (1/0), NaN.
struct div_by_count {
  static constexpr grad gradient = grad::rule;
  static constexpr const char* name = "div_by_count";
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply(C a, C b) { return a / detail::select_value(b < C(1), C(1), b); }
};

// log_softmax_sub<Axis>: log-softmax's last step, z - log(sum(exp(z))), given
// z (x shifted by its row max) and log(sum(exp(z))) (built without gradient).
// Its rule is log-softmax's whole gradient taken from its value y,
// g - exp(y) * sum(g): backward reads x and one value per row, never an
// exp(z) of x's size kept from forward (the loss's [tokens, vocab] logits).
template <int Axis>
struct log_softmax_sub {
  static constexpr grad gradient = grad::rule;
  static constexpr const char* name = "log_softmax";
  static constexpr int axis = Axis;
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply(C z, C log_sum_exp) { return z - log_sum_exp; }
};

// softmax_div<Axis>: softmax's last step, exp(z) / sum(exp(z)), given z (x
// shifted by its row max) and sum(exp(z)) (built without gradient). Its rule
// is softmax's whole gradient taken from its value y, y * (g - sum(g * y)):
// the exp(z) that forward sums is read by nothing else and stays in the
// sum's loop, and backward reads y, never an exp(z) of x's size besides it.
// (A group's body computes it as exp then a division, each rounded to the
// node's dtype: lower/kernel_expr.hpp, node_body.)
template <int Axis>
struct softmax_div {
  static constexpr grad gradient = grad::rule;
  static constexpr const char* name = "softmax";
  static constexpr int axis = Axis;
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply(C z, C sum_exp) { return math::exp(z) / sum_exp; }
};

// cast<T>: the value converted to T (rounded once, at the node's output).
template <class T>
struct cast {
  static constexpr grad gradient = grad::pass;
  static constexpr const char* name = "cast";
  using result_dtype = T;
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply(C x) { return x; }
};
// no_grad: the value, with no gradient path through it.
struct no_grad {
  static constexpr grad gradient = grad::none;
  static constexpr const char* name = "no_grad";
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply(C x) { return x; }
};
// checkpoint: the value, ending a recompute region (see ctg::checkpoint).
struct checkpoint {
  static constexpr grad gradient = grad::pass;
  static constexpr const char* name = "checkpoint";
  static constexpr bool region_end = true;
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply(C x) { return x; }
};
// broadcast<S, Like>: the value stretched to shape S. Dims of S that are
// ctg::dyn take their run-time size from node Like (which has shape S).
template <class S, class Like = void>
struct broadcast {
  static_assert(!std::is_void_v<Like> || S::is_static, "ctg: broadcast_to needs a static shape");
  static constexpr grad gradient = grad::pass;
  static constexpr const char* name = "broadcast";
  using result_shape = S;
  using like = Like;
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply(C x) { return x; }
};

// Index-aware ops see where they are: `col` is the index along the last dim
// and `row` the index along the one before it (the CPU loops and the CUDA
// kernels both provide them).
//
// one_hot<S, Ignore...>: 1 where the column equals the index value (an i32
// child, last dim 1). Its ids must be in [0, classes) or equal the optional
// Ignore (a zero row); the store checks them (exec/index_checks.hpp).
template <class S, int... Ignore>
struct one_hot {
  static_assert(sizeof...(Ignore) <= 1, "ctg: one_hot takes at most one ignored index");
  static constexpr grad gradient = grad::none;
  static constexpr const char* name = "one_hot";
  static constexpr bool index_aware = true;
  static constexpr dim_t id_count = S::dims[S::rank - 1];
  static constexpr bool has_ignore = sizeof...(Ignore) == 1;
  static constexpr int ignore = (0 + ... + Ignore);
  using result_dtype = f32;
  using result_shape = S;
  // (The column as an i32, as the ids are: a 64-bit integer to float has no
  // AVX2 instruction, and one such conversion keeps a whole CPU loop scalar.)
  // (An ignored id that is a class too, such as a padding id 0, gives its
  // zero row here: it gave its class's 1, and cross_entropy summed the
  // ignored rows' losses over the count of the others.)
  static constexpr bool ignore_is_a_class = has_ignore && ignore >= 0 && ignore < id_count;
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply_at(dim_t col, dim_t, C idx) {
    if constexpr (ignore_is_a_class)
      return C(C(static_cast<std::int32_t>(col)) == idx && idx != C(ignore));
    else
      return C(C(static_cast<std::int32_t>(col)) == idx);
  }
};
// index_valid<Ignore>: 1 where the index is not Ignore, 0 where it is.
template <int Ignore>
struct index_valid {
  static constexpr grad gradient = grad::none;
  static constexpr const char* name = "index_valid";
  using result_dtype = f32;
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply(C idx) { return C(idx != C(Ignore)); }
};
// causal_mask<NegInf>: keeps x where col <= row; elsewhere -inf (forward) or 0 (its backward).
// (col and row compared as i32, as one_hot's column: a 64-bit compare kept
// the CPU's loop from vectorizing well without SSE4.2 / AVX2, a softmax's
// forward at 3.5x the time. A step's shapes keep both below 2^31:
// resolve_shapes.)
template <bool NegInf>
struct causal_mask {
  static constexpr grad gradient = grad::rule;
  static constexpr const char* name = "causal_mask";
  static constexpr bool index_aware = true;
  static constexpr bool reads_row = true;
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply_at(dim_t col, dim_t row, C x) {
    return detail::select_value(static_cast<std::int32_t>(col) <= static_cast<std::int32_t>(row), x,
                                NegInf ? detail::minus_infinity<C>() : C(0));
  }
};

// Every element functor, for tests that walk them all (tests/unit/rules.cpp).
// A new functor goes here too.
template <class... Ops>
struct functor_list {};
using all_functors =
    functor_list<neg, exp, log, sqrt, rsqrt, square, abs, relu, sigmoid, tanh, silu, gelu, sign, step, silu_grad,
                 gelu_grad, add, sub, mul, div, equal, keep_where, div_by_count, log_softmax_sub<-1>, softmax_div<-1>, cast<f32>, no_grad, checkpoint,
                 broadcast<shape<2, 3>>, one_hot<shape<2, 3>>, index_valid<-1>, causal_mask<true>, causal_mask<false>>;

// ------------------------------------------------------------ reductions ----
struct sum_r {
  static constexpr const char* name = "sum";
  template <class C> CTG_HD static constexpr C identity() { return C(0); }
  template <class C> CTG_HD static CTG_FORCEINLINE C combine(C a, C b) { return a + b; }
  template <class C> CTG_HD static CTG_FORCEINLINE C finalize(C a, double) { return a; }
};
struct mean_r {
  static constexpr const char* name = "mean";
  template <class C> CTG_HD static constexpr C identity() { return C(0); }
  template <class C> CTG_HD static CTG_FORCEINLINE C combine(C a, C b) { return a + b; }
  template <class C> CTG_HD static CTG_FORCEINLINE C finalize(C a, double count) { return a / C(count); }
};
struct max_r {
  static constexpr const char* name = "max";
  template <class C> CTG_HD static constexpr C identity() { return detail::minus_infinity<C>(); }
  template <class C> CTG_HD static CTG_FORCEINLINE C combine(C a, C b) { return b > a || b != b ? b : a; }
  template <class C> CTG_HD static CTG_FORCEINLINE C finalize(C a, double) { return a; }
};
}  // namespace op

}  // namespace ctg

CTG_HOT_END

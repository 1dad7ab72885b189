#pragma once
// The dtype rules of ctg, in one place.
//
//  * Elementwise arithmetic on two dtypes gives the wider one: f64 > f32 > (bf16, f16);
//    bf16 with f16 gives f32. A literal (ctg::lit<v>) takes the other operand's dtype.
//  * Unary math, reductions (sum, mean, max) and transpose keep the input dtype;
//    the arithmetic itself runs in f32 (f64 for f64) and is rounded once, at the node's output.
//  * matmul gives the wider operand dtype, accumulating in f32 (f64 for f64).
//  * i32 (index tensors: token ids, targets) is read only by gather, one_hot,
//    index_valid and views; arithmetic on it does not compile.
//  * cast<T> gives T. fp8 tensors (e4m3, e5m2) never enter arithmetic directly:
//    they need a scale ("ctg: fp8 needs a scale").
#include <type_traits>

#include <ctg/core/config.hpp>
#include <ctg/core/dtypes.hpp>

CTG_HOT_BEGIN

namespace ctg {

// The type arithmetic runs in for a node of dtype T.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, f64>, f64, f32>;

namespace detail {
template <class T>
inline constexpr int width_rank = std::is_same_v<T, f64> ? 3 : std::is_same_v<T, f32> ? 2 : 1;
}

template <class A, class B>
struct promote {
  static_assert(!index_type<A> && !index_type<B>,
                "ctg: i32 index tensors do not enter arithmetic (use gather, one_hot or cross_entropy)");
  static_assert(!is_fp8_v<A> && !is_fp8_v<B>,
                "ctg: fp8 needs a scale: an e4m3/e5m2 tensor cannot enter arithmetic directly; "
                "dequantize it with its scale first");
  using type = std::conditional_t<
      std::is_same_v<A, B>, A,
      std::conditional_t<(detail::width_rank<A> > detail::width_rank<B>), A,
                         std::conditional_t<(detail::width_rank<B> > detail::width_rank<A>), B, f32>>>;
};
template <class A, class B>
using promote_t = typename promote<A, B>::type;

// Load an element of dtype T as its compute type; store a compute value as T.
template <class T>
CTG_HD CTG_FORCEINLINE constexpr compute_t<T> load_as(const T& v) {
  if constexpr (std::is_same_v<T, f32> || std::is_same_v<T, f64>) return v;
  else if constexpr (index_type<T>) return static_cast<float>(v);  // exact below 2^24
  else return to_float(v);
}
template <class T, class C>
CTG_HD CTG_FORCEINLINE constexpr T store_as(C v) {
  if constexpr (std::is_same_v<T, f32> || std::is_same_v<T, f64>) return static_cast<T>(v);
  else return from_float<T>(static_cast<float>(v));
}
// Round a compute value to what a node of dtype T holds (once per node output).
template <class T, class C>
CTG_HD CTG_FORCEINLINE constexpr C round_to(C v) {
  if constexpr (std::is_same_v<T, C>) return v;
  else return static_cast<C>(load_as<T>(store_as<T>(v)));
}

}  // namespace ctg

CTG_HOT_END

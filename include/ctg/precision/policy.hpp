#pragma once
// Precision policies: a type parameter of layers and models that decides, at
// compile time, which casts a layer inserts. A policy holds no state and
// caches nothing: the same cast in two places is one node only when the two
// whole types are equal, and no_grad is part of the type (B5). A cast keeps
// the grad-ness of its input, so a frozen leaf stays frozen under any policy
// (B1).
//
//   full<T>       parameters, matmuls and elementwise work in T; statistics
//                 (norms, softmax, loss) in f32 (f64 when T is f64), and so
//                 is a model's own choice of stream (nn::transformer keeps
//                 its residual stream in the stats type)
//   autocast<C>   f32 master parameters; matmul operands and results in C
//                 (bf16 or f16); norms, softmax and the loss in f32
#include <ctg/graph/ops.hpp>

namespace ctg::precision {

template <class T>
struct full {
  static_assert(element_type<T> && !is_fp8_v<T>, "ctg: full<T> takes f32, f64, bf16 or f16");
  using param_type = T;                                                   // dtype of the parameters layers declare
  using matmul_type = T;                                                  // matmul operands and results
  using stats_type = std::conditional_t<std::is_same_v<T, f64>, f64, f32>;  // norms, softmax, loss
};

template <class C>
struct autocast {
  static_assert(std::is_same_v<C, bf16> || std::is_same_v<C, f16>, "ctg: autocast<C> takes bf16 or f16");
  using param_type = f32;
  using matmul_type = C;
  using stats_type = f32;
};

template <class P>
concept policy = requires {
  typename P::param_type;
  typename P::matmul_type;
  typename P::stats_type;
};

// x as a matmul operand / as input to statistics, under policy P.
template <policy P, expr X>
constexpr auto for_matmul(X x) {
  return cast<typename P::matmul_type>(x);
}
template <policy P, expr X>
constexpr auto for_stats(X x) {
  return cast<typename P::stats_type>(x);
}

}  // namespace ctg::precision

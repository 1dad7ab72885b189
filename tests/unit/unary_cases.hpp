#pragma once
// The public unary ops as test cases, shared by ops_grad.cpp (f64, f32) and
// ops_grad_narrow.cpp (bf16, f16): how to build each, a scalar <cmath> reference,
// and a domain where it is smooth.
#include "grad_check.hpp"

namespace unary_cases {

// One struct per public unary op: how to build it, a scalar reference, and a
// domain where it is smooth (log/sqrt/rsqrt positive; relu/abs away from 0).
#define UNARY_CASE(NAME, BUILD, REF, LO, HI, AWAY)                    \
  struct NAME##_case {                                                \
    static constexpr const char* name = #NAME;                        \
    template <class X>                                                \
    static auto make(X x) {                                           \
      return BUILD;                                                   \
    }                                                                 \
    static double ref(double x) { return REF; }                       \
    static constexpr double lo = LO, hi = HI;                         \
    static constexpr bool away = AWAY;                                \
  };
UNARY_CASE(neg, -x, -x, -2.0, 2.0, false)
UNARY_CASE(exp, ctg::exp(x), std::exp(x), -1.5, 1.5, false)
UNARY_CASE(log, ctg::log(x), std::log(x), 0.3, 3.0, false)
UNARY_CASE(sqrt, ctg::sqrt(x), std::sqrt(x), 0.3, 3.0, false)
UNARY_CASE(rsqrt, ctg::rsqrt(x), 1.0 / std::sqrt(x), 0.3, 3.0, false)
UNARY_CASE(square, ctg::square(x), x* x, -2.0, 2.0, false)
UNARY_CASE(abs, ctg::abs(x), std::fabs(x), 0.2, 2.0, true)
UNARY_CASE(relu, ctg::relu(x), x > 0 ? x : 0.0, 0.2, 2.0, true)
UNARY_CASE(sigmoid, ctg::sigmoid(x), 1.0 / (1.0 + std::exp(-x)), -3.0, 3.0, false)
UNARY_CASE(tanh, ctg::tanh(x), std::tanh(x), -2.0, 2.0, false)
UNARY_CASE(silu, ctg::silu(x), x / (1.0 + std::exp(-x)), -3.0, 3.0, false)
UNARY_CASE(gelu, ctg::gelu(x), 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))), -3.0, 3.0, false)
#undef UNARY_CASE

#define ALL_UNARY_CASES                                                                                  \
  unary_cases::neg_case, unary_cases::exp_case, unary_cases::log_case, unary_cases::sqrt_case,            \
      unary_cases::rsqrt_case, unary_cases::square_case, unary_cases::abs_case, unary_cases::relu_case,   \
      unary_cases::sigmoid_case, unary_cases::tanh_case, unary_cases::silu_case, unary_cases::gelu_case

}  // namespace unary_cases

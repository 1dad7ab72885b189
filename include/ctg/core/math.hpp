#pragma once
// Scalar math shared by the CPU loops and the CUDA kernels. Every function is
// written once for float and double so both backends compute the same thing.
#include <cmath>

#include "config.hpp"

namespace ctg::math {

#if defined(__CUDA_ARCH__)
#define CTG_MATH_FN(name)                                               \
  CTG_HD CTG_FORCEINLINE float name(float x) { return ::name##f(x); } \
  CTG_HD CTG_FORCEINLINE double name(double x) { return ::name(x); }
#else
#define CTG_MATH_FN(name)                                                 \
  CTG_HD CTG_FORCEINLINE float name(float x) { return std::name(x); }   \
  CTG_HD CTG_FORCEINLINE double name(double x) { return std::name(x); }
#endif
CTG_MATH_FN(exp)
CTG_MATH_FN(log)
CTG_MATH_FN(sqrt)
CTG_MATH_FN(tanh)
CTG_MATH_FN(erf)
#undef CTG_MATH_FN

template <class C>
CTG_HD CTG_FORCEINLINE C abs(C x) { return x < C(0) ? -x : x; }
template <class C>
CTG_HD CTG_FORCEINLINE C sigmoid(C x) { return C(1) / (C(1) + exp(-x)); }

}  // namespace ctg::math

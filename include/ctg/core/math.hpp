#pragma once
// Scalar math shared by the CPU loops and the CUDA kernels. Every function is
// written once for float and double so both backends compute the same thing.
//
// double: the C library's functions (f64 is the reference type).
// float:  exp, log, tanh and erf are written out here: Cody-Waite range
//         reduction and minimax polynomials (fitted for exactly these
//         formulas), no calls, no tables, no branches on the data; only
//         + - * /, integer operations on the bits, and selects. So
//           * g++ and clang vectorize loops that call them (the selects become
//             blends), where a call to libm's expf keeps a loop scalar. (g++
//             12 at -O2 still vectorizes only loops that need no scalar
//             epilogue and no run-time alias check.)
//           * the host and nvcc's device code run the same IEEE operations in
//             the same order, so CPU and GPU results agree bit for bit (see
//             "contraction" below).
//         Max error against the exact value over every float input (the
//         bounds tests/unit/math.cpp checks on dense sweeps are exp, log
//         <= 2 ulp, tanh <= 3 ulp, erf <= 4 ulp):
//           exp 0.98, log 0.84, tanh 1.35, erf 1.31 ulp (without FMA);
//           exp 1.01, log 0.76, tanh 1.33, erf 1.03 ulp (a*b+c fused).
//         Subnormal inputs are handled, and exp underflows gradually
//         (subnormal results, then 0 below 2^-150). NaN in gives NaN out.
// sqrt stays the library's: IEEE sqrt is correctly rounded on both sides and
// vectorizes.
//
// Contraction: bit-for-bit agreement needs each a*b+c here to stay two
// rounded operations. On the device the products are __fmul_rn, which nvcc
// never fuses. On the host g++ fuses a*b+c into an FMA whenever the target
// has one (-march=native, -mfma, x86-64-v3), in every -std mode: its C++
// default is -ffp-contract=fast. So this file's code, as all of ctg's per-
// element code, is compiled with -ffp-contract=off (CTG_HOT_BEGIN,
// config.hpp). -ffast-math would break the range reduction ((t + 1.5*2^23)
// - 1.5*2^23 must not be simplified): config.hpp refuses it.
#include <cmath>
#include <cstdint>

#include "config.hpp"
#include "float_bits.hpp"

CTG_HOT_BEGIN

namespace ctg::math {

#if defined(__CUDA_ARCH__)
#define CTG_MATH_FN(name) \
  CTG_HD CTG_FORCEINLINE double name(double x) { return ::name(x); }
#else
#define CTG_MATH_FN(name) \
  CTG_HD CTG_FORCEINLINE double name(double x) { return std::name(x); }
#endif
CTG_MATH_FN(exp)
CTG_MATH_FN(log)
CTG_MATH_FN(tanh)
CTG_MATH_FN(erf)
CTG_MATH_FN(sqrt)
#undef CTG_MATH_FN

#if defined(__CUDA_ARCH__)
CTG_HD CTG_FORCEINLINE float sqrt(float x) { return ::sqrtf(x); }
#else
CTG_HD CTG_FORCEINLINE float sqrt(float x) { return std::sqrt(x); }
#endif

}  // namespace ctg::math

// The pieces of the math functions below (ctg's one internal namespace).
namespace ctg::detail {
using u32 = std::uint32_t;
using i32 = std::int32_t;

// A rounded product that is never fused with a following add.
CTG_HD CTG_FORCEINLINE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

CTG_HD CTG_FORCEINLINE float abs_f(float x) { return f32_from_bits(f32_bits(x) & 0x7FFFFFFFu); }
CTG_HD CTG_FORCEINLINE float with_sign_of(float mag, float x) {
  return f32_from_bits(f32_bits(mag) | (f32_bits(x) & 0x80000000u));
}
// c ? a : b, as a bitwise blend of both (already computed) values. A plain
// ?: lets g++ sink the computation of a value into the branch that uses it;
// FP operations there may trap (-ftrapping-math is the default), so
// if-conversion gives up and the loop does not vectorize unless the target
// has masked arithmetic (AVX-512). Data-dependent choices all go through here.
CTG_HD CTG_FORCEINLINE float select_f(bool c, float a, float b) {
  const u32 m = 0u - static_cast<u32>(c);
  return f32_from_bits((f32_bits(a) & m) | (f32_bits(b) & ~m));
}
// -inf as C: built from its bits, where -1 / 0 in device code is a real
// division that takes its slow path on every call.
template <class C>
CTG_HD CTG_FORCEINLINE constexpr C minus_infinity() {
  return static_cast<C>(hd_bit_cast<double>(std::uint64_t{0xFFF0000000000000u}));
}
// c ? a : b for an element functor's compute type C, as select_f (float,
// double; other types, and the device, whose selects are predicated, take
// a plain ?:).
template <class C>
CTG_HD CTG_FORCEINLINE C select_value(bool c, C a, C b) {
#ifndef __CUDA_ARCH__
  if constexpr (std::is_same_v<C, float>) {
    return select_f(c, a, b);
  } else if constexpr (std::is_same_v<C, double>) {
    const std::uint64_t m = 0u - static_cast<std::uint64_t>(c);
    return hd_bit_cast<double>((hd_bit_cast<std::uint64_t>(a) & m) | (hd_bit_cast<std::uint64_t>(b) & ~m));
  } else
#endif
  {
    return c ? a : b;
  }
}

// 2^n as a float, n in [-126, 127], built from its bits.
CTG_HD CTG_FORCEINLINE float pow2i(i32 n) { return f32_from_bits((static_cast<u32>(n) + 127u) << 23); }

// ln 2 = ln2_hi + ln2_lo. ln2_hi has 12 significant bits, so n * ln2_hi is
// exact for |n| < 2^12, and x - n * ln2_hi is exact near x = n ln 2.
inline constexpr float ln2_hi = 0x1.62ep-1f;
inline constexpr float ln2_lo = 0x1.0bfbe8p-15f;
inline constexpr float log2e = 0x1.715476p+0f;
inline constexpr float round_shift = 0x1.8p23f;  // t + 1.5*2^23 rounds t to an integer, |t| < 2^22

// x = n ln2 + r, |r| <= ln2/2 + 2^-20 (r rounded once: its error is at most
// 2^-26, which costs exp at most a quarter ulp). Meaningful for |x| < 2^21;
// larger x (and inf, NaN) give garbage, not UB.
struct reduced {
  float r;
  i32 n;
};
CTG_HD CTG_FORCEINLINE reduced reduce_ln2(float x) {
  const float t = mul_rn(x, log2e) + round_shift;  // n + 1.5*2^23: n in the low mantissa bits
  const float nf = t - round_shift;             // exact
  const i32 n = static_cast<i32>(f32_bits(t) - f32_bits(round_shift));  // modular: no overflow
  const float hi = x - mul_rn(nf, ln2_hi);         // exact
  return {hi - mul_rn(nf, ln2_lo), n};
}

// exp(r) - 1 = r + r^2 P(r) for |r| <= ln2/2 + 2^-20, P minimax (relative
// error of exp(r) <= 3.1e-9).
CTG_HD CTG_FORCEINLINE float expm1_reduced(float r) {
  float p = 0x1.6a2404p-10f;
  p = mul_rn(p, r) + 0x1.123ap-7f;
  p = mul_rn(p, r) + 0x1.5558f2p-5f;
  p = mul_rn(p, r) + 0x1.555492p-3f;
  p = mul_rn(p, r) + 0x1.fffffcp-2f;
  return mul_rn(mul_rn(r, r), p) + r;
}

// e^x; NaN in gives a NaN.
CTG_HD CTG_FORCEINLINE float exp_core(float x) {
  // exp(x) overflows from 88.7228 on: clamping there gives the same results
  // and keeps the reduction's n at most 128. Under -103.973 it is below half
  // the least subnormal: +0, selected at the end, with x = 0 computed in
  // its place. (Computing it would round a subnormal product to 0, which
  // x86 does in microcode, ~100 cycles an instruction: a causal mask's -inf
  // scores made a CPU softmax 4x slower.) NaN passes both tests.
  const bool vanishes = x < -104.0f;
  x = select_f(x > 89.0f, 89.0f, x);
  x = select_f(vanishes, 0.0f, x);
  const reduced k = reduce_ln2(x);
  const float m = 1.0f + expm1_reduced(k.r);  // in [0.70, 1.42]
  // m 2^n in two products, each by a normal power of two for n in [-150, 128]:
  // the first is exact, the second rounds once (gradual underflow, overflow
  // to inf). (Not an integer add to m's exponent: that would turn a NaN m
  // into a number.)
  const i32 n1 = k.n >> 1;
  const float e = mul_rn(m * pow2i(n1), pow2i(k.n - n1));  // mul: a caller's 1 + e^x must not fuse with it
  return select_f(vanishes, 0.0f, e);
}
}  // namespace ctg::detail

namespace ctg::math {

// e^x.
CTG_HD CTG_FORCEINLINE float exp(float x) { return detail::exp_core(x); }

// Natural log: x = 2^k (1 + f), sqrt(2)/2 <= 1 + f < sqrt(2), and
// log(1 + f) = 2 atanh(s), s = f / (2 + f), written as f - f^2/2 + s (f^2/2 + R(s^2))
// with R a minimax polynomial (relative error of log(1+f) <= 1.4e-9).
CTG_HD CTG_FORCEINLINE float log(float x) {
  using detail::f32_bits, detail::f32_from_bits, detail::i32, detail::ln2_hi, detail::ln2_lo, detail::mul_rn,
      detail::select_f, detail::u32;
  const bool sub = x < 0x1p-126f;  // subnormal (or <= 0, dealt with below): scale up by 2^23
  u32 ix = f32_bits(select_f(sub, mul_rn(x, 0x1p23f), x));
  i32 k = -23 & -static_cast<i32>(sub);
  // Shift the mantissa range to [sqrt(2)/2, sqrt(2)): k counts the carry.
  ix += 0x3F800000u - 0x3F3504F3u;
  k += static_cast<i32>(ix >> 23) - 127;
  ix = (ix & 0x007FFFFFu) + 0x3F3504F3u;
  const float f = f32_from_bits(ix) - 1.0f;  // exact
  const float s = f / (2.0f + f);
  const float z = mul_rn(s, s);
  float R = 0x1.327374p-2f;
  R = mul_rn(R, z) + 0x1.995ac6p-2f;
  R = mul_rn(R, z) + 0x1.55557ap-1f;
  R = mul_rn(R, z);
  const float hfsq = mul_rn(mul_rn(0.5f, f), f);
  const float dk = static_cast<float>(k);
  const float lo = ((mul_rn(s, hfsq + R) + mul_rn(dk, ln2_lo)) - hfsq) + f;
  const float r = lo + mul_rn(dk, ln2_hi);  // dk * ln2_hi exact
  // 0 -> -inf; < 0 -> NaN; +inf and NaN -> themselves.
  const float special =
      select_f(x == 0.0f, f32_from_bits(0xFF800000u), select_f(x < 0.0f, f32_from_bits(0x7FC00000u), x));
  // x positive and finite: one unsigned compare of the bits (no && to branch on)
  return select_f(f32_bits(x) - 1u < 0x7F7FFFFFu, r, special);
}

// tanh, odd by construction (tanh(-0) = -0). |x| < ln(3)/2: x + x^3 P(x^2), P
// minimax (relative error <= 1.1e-9). Above: 1 - 2 / (e^(2|x|) + 1), whose
// rounding errors shrink as the result nears 1; |x| is clamped at 9.5, where
// that rounds to 1 (it does from 9.02 on).
CTG_HD CTG_FORCEINLINE float tanh(float x) {
  using detail::abs_f, detail::expm1_reduced, detail::mul_rn, detail::pow2i, detail::reduce_ln2, detail::reduced,
      detail::select_f, detail::with_sign_of;
  const float a = abs_f(x);
  const float u = mul_rn(a, a);
  float p = -0x1.9b4298p-8f;
  p = mul_rn(p, u) + 0x1.594012p-6f;
  p = mul_rn(p, u) - 0x1.b928d2p-5f;
  p = mul_rn(p, u) + 0x1.110d28p-3f;
  p = mul_rn(p, u) - 0x1.55554ap-2f;
  const float below = mul_rn(mul_rn(a, u), p) + a;
  const float c = select_f(a > 9.5f, 9.5f, a);  // NaN passes
  const reduced k = reduce_ln2(c + c);        // n in [0, 27]
  const float e = pow2i(k.n);                 // e^(2c) = e (1 + s); e + 1 exact up to n = 23
  const float above = 1.0f - 2.0f / (mul_rn(e, expm1_reduced(k.r)) + (e + 1.0f));
  return with_sign_of(select_f(a < 0.5493061443f, below, above), x);
}

// erf, odd. |x| < 1: x + x (P(x^2) - 1). |x| >= 1: 1 - exp(Q(|x| - 1)), Q a polynomial for
// log(erfc), fitted for relative error in erf; 1 above 4 (erf rounds to 1 from 3.92).
CTG_HD CTG_FORCEINLINE float erf(float x) {
  using detail::abs_f, detail::exp_core, detail::mul_rn, detail::select_f, detail::with_sign_of;
  const float a = abs_f(x);
  const float u = mul_rn(a, a);
  float p = 0x1.4922dcp-14f;  // erf(x)/x on [0, 1], relative error <= 1.3e-9
  p = mul_rn(p, u) - 0x1.a3de3p-11f;
  p = mul_rn(p, u) + 0x1.54027ap-8f;
  p = mul_rn(p, u) - 0x1.b7f8acp-6f;
  p = mul_rn(p, u) + 0x1.ce2cf2p-4f;
  p = mul_rn(p, u) - 0x1.81273ep-2f;
  p = mul_rn(p, u) + 0x1.06eba8p-3f;  // 2/sqrt(pi) - 1, so the last rounding is the sum's
  const float below = a + mul_rn(a, p);
  const float t = a - 1.0f;
  float q = 0x1.86dd8ep-13f;  // log(erfc(1 + t)) on t in [0, 3], erf error <= 1.1e-9
  q = mul_rn(q, t) - 0x1.df8fd2p-10f;
  q = mul_rn(q, t) + 0x1.444124p-7f;
  q = mul_rn(q, t) - 0x1.53ff24p-5f;
  q = mul_rn(q, t) - 0x1.afad1cp-1f;
  q = mul_rn(q, t) - 0x1.51c9aap+1f;
  q = mul_rn(q, t) - 0x1.d97fcp+0f;
  const float above = 1.0f - exp_core(q);
  const float r = select_f(a < 1.0f, below, select_f(a > 4.0f, 1.0f, above));
  return with_sign_of(r, x);
}

// |x| by clearing the sign bit, as IEEE and PyTorch: abs(-0) is +0 (x < 0 ?
// -x : x kept -0, and 1 / abs(-0) was -inf).
template <class C>
CTG_HD CTG_FORCEINLINE C abs(C x) {
  if constexpr (std::is_same_v<C, double>)
    return detail::hd_bit_cast<double>(detail::hd_bit_cast<std::uint64_t>(x) & 0x7FFFFFFFFFFFFFFFull);
  else
    return detail::abs_f(x);
}
template <class C>
CTG_HD CTG_FORCEINLINE C sigmoid(C x) { return C(1) / (C(1) + exp(-x)); }

}  // namespace ctg::math

CTG_HOT_END

#pragma once
// f16: IEEE 754 binary16 storage type (1 sign, 5 exponent, 10 mantissa bits).
// No arithmetic: compute happens in f32.

#include <cstdint>

#include <ctg/core/config.hpp>
#include <ctg/core/float_bits.hpp>

CTG_HOT_BEGIN

namespace ctg {

namespace detail {

// f32 -> f16, round-to-nearest-even with subnormals; overflow rounds to
// infinity (|x| >= 65520); any NaN becomes 0x7FFF, as cuda_fp16.h's
// __float2half does. On a GPU it is the instruction __float2half compiles
// to, cvt.rn.f16.f32 (cuda.dtype_roundtrip compares the two).
CTG_HD CTG_FORCEINLINE constexpr std::uint16_t f32_to_f16_bits(float f) noexcept {
#ifdef __CUDA_ARCH__
  if (!__builtin_is_constant_evaluated()) {
    std::uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
#endif
  const std::uint32_t u = f32_bits(f);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFFu;
  std::uint32_t r = rne_magnitude<10, 15>(a);
  if (r > 0x7C00u) r = 0x7C00u;
  return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | r);
}

// f16 -> f32 is exact; every NaN becomes 0x7FFFFFFF, as __half2float does.
// Branch-free (selects, one unconditional f32 subtraction) so loops vectorize.
// On a GPU: the instruction __half2float compiles to, cvt.f32.f16.
CTG_HD CTG_FORCEINLINE constexpr float f16_bits_to_f32(std::uint16_t h) noexcept {
#ifdef __CUDA_ARCH__
  if (!__builtin_is_constant_evaluated()) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
  }
#endif
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  const std::uint32_t m = h & 0x3FFu;
  // normal: 2^(e-15) * (1 + m/2^10); zero/subnormal (e == 0): 2^-14 * (1 + m/2^10) - 2^-14 = m * 2^-24,
  // exact in f32
  const std::uint32_t eb = e == 0 ? 113u : e + 112u;
  const float mag = f32_from_bits((eb << 23) | (m << 13)) - (e == 0 ? 0x1p-14f : 0.0f);
  const std::uint32_t special = m != 0 ? f32_canonical_nan_bits : (sign | 0x7F800000u);
  return f32_from_bits(e == 0x1Fu ? special : (sign | f32_bits(mag)));
}

}  // namespace detail

struct f16 {
  std::uint16_t bits;

  constexpr f16() = default;
  CTG_FORCEINLINE explicit constexpr CTG_HD f16(float f) noexcept : bits(detail::f32_to_f16_bits(f)) {}
  CTG_FORCEINLINE static constexpr CTG_HD f16 from_bits(std::uint16_t b) noexcept {
    f16 r{};
    r.bits = b;
    return r;
  }
  CTG_FORCEINLINE explicit constexpr CTG_HD operator float() const noexcept { return detail::f16_bits_to_f32(bits); }
};

}  // namespace ctg

CTG_HOT_END

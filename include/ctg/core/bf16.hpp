#pragma once
// bf16: bfloat16 storage type (1 sign, 8 exponent, 7 mantissa bits). The upper
// half of an IEEE f32. No arithmetic: compute happens in f32.

#include <cstdint>

#include <ctg/core/config.hpp>
#include <ctg/core/float_bits.hpp>

CTG_HOT_BEGIN

namespace ctg {

namespace detail {

// f32 -> bf16, round-to-nearest-even; overflow rounds to infinity; any NaN
// becomes 0x7FFF, as cuda_bf16.h's __float2bfloat16 does (host and sm_80+).
// On a GPU (sm_80+) it is the instruction __float2bfloat16 compiles to,
// cvt.rn.bf16.f32 (one instruction for the five below, in every rounding of
// every bf16 node of a kernel; cuda.dtype_roundtrip compares the two).
CTG_HD CTG_FORCEINLINE constexpr std::uint16_t f32_to_bf16_bits(float f) noexcept {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (!__builtin_is_constant_evaluated()) {
    std::uint16_t b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
  }
#endif
  const std::uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// bf16 -> f32 is exact; NaN payloads and signs are kept (as __bfloat162float).
CTG_HD CTG_FORCEINLINE constexpr float bf16_bits_to_f32(std::uint16_t b) noexcept {
  return f32_from_bits(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace detail

struct bf16 {
  std::uint16_t bits;

  constexpr bf16() = default;
  CTG_FORCEINLINE explicit constexpr CTG_HD bf16(float f) noexcept : bits(detail::f32_to_bf16_bits(f)) {}
  CTG_FORCEINLINE static constexpr CTG_HD bf16 from_bits(std::uint16_t b) noexcept {
    bf16 r{};
    r.bits = b;
    return r;
  }
  CTG_FORCEINLINE explicit constexpr CTG_HD operator float() const noexcept { return detail::bf16_bits_to_f32(bits); }
};

}  // namespace ctg

CTG_HOT_END

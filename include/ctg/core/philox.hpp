#pragma once
// Counter-based random numbers: Philox-4x32-10 (Salmon, Moraes, Dror, Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11).
//
// Why counter-based: the i-th random number of a stream is a pure function of
// (key, counter). A dropout mask can therefore be regenerated bit for bit when
// a checkpointed region recomputes its forward (B4), on the CPU and on any GPU
// thread, with no generator state to save, advance or keep in step.
//
// Everything here is constexpr and CTG_HD: the same code serves the CPU
// backend, the CUDA kernels and compile-time tests.

#include <cstddef>
#include <cstdint>

#include <ctg/core/config.hpp>
#include <ctg/core/hash.hpp>

CTG_HOT_BEGIN

namespace ctg {

struct u32x4 {
  std::uint32_t v[4];
};

namespace detail {

// Round multipliers and Weyl key increments from the paper (the latter are the
// golden ratio and sqrt(3) - 1 in 0.32 fixed point).
inline constexpr std::uint32_t philox_m0 = 0xD2511F53u;
inline constexpr std::uint32_t philox_m1 = 0xCD9E8D57u;
inline constexpr std::uint32_t philox_w0 = 0x9E3779B9u;
inline constexpr std::uint32_t philox_w1 = 0xBB67AE85u;

// One Philox S-box round: two 32x32->64 multiplies; the high halves are mixed
// with the other two words and the key, and the words are permuted.
CTG_HD constexpr u32x4 philox_round(u32x4 c, std::uint32_t k0, std::uint32_t k1) noexcept {
  const std::uint64_t p0 = static_cast<std::uint64_t>(philox_m0) * c.v[0];
  const std::uint64_t p1 = static_cast<std::uint64_t>(philox_m1) * c.v[2];
  const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
  const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
  return u32x4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
}

}  // namespace detail

// Ten rounds; the key advances by the Weyl increments between rounds (nine
// bumps in all), as in the paper and Random123's reference implementation.
CTG_HD constexpr u32x4 philox4x32_10(u32x4 counter, std::uint32_t key0, std::uint32_t key1) noexcept {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += detail::philox_w0;
      key1 += detail::philox_w1;
    }
    counter = detail::philox_round(counter, key0, key1);
  }
  return counter;
}

// A uniform float in [0, 1) for element `index` of the stream (seed, step,
// stream). One Philox call yields four words, so elements 4j..4j+3 share the
// counter (j low, j high, step low, stream) with key (seed low, seed high ^
// step high * 0x9E3779B9) and take word index % 4: the step's high word
// changes the key, so a 64-bit step count never repeats a mask (below 2^32
// steps the key is the seed's alone). The top 24 bits scaled by 2^-24 give every multiple of 2^-24
// in [0, 1) with equal probability: exactly representable in f32, never 1.
CTG_HD constexpr float philox_uniform(std::uint64_t seed, std::uint64_t step, std::uint32_t stream,
                                      std::uint64_t index) noexcept {
  const std::uint64_t block = index / 4;
  const u32x4 ctr{{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                   static_cast<std::uint32_t>(step), stream}};
  const std::uint32_t step_high = static_cast<std::uint32_t>(step >> 32) * 0x9E3779B9u;
  const u32x4 r =
      philox4x32_10(ctr, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32) ^ step_high);
  // (The word picked by selects, not by indexing: a GPU keeps r in registers only then.)
  const unsigned w = static_cast<unsigned>(index % 4);
  const std::uint32_t word = w < 2 ? (w == 0 ? r.v[0] : r.v[1]) : (w == 2 ? r.v[2] : r.v[3]);
  return static_cast<float>(word >> 8) * 0x1p-24f;
}

// A stable stream id derived from a node's compile-time name (FNV-1a, 32
// bits, over its bytes). Two names of one graph with one hash do not compile
// (graph/traits.hpp: check_dropout_names).
CTG_HD constexpr std::uint32_t name_hash(const char* s, std::size_t n) noexcept { return fnv1a32(s, n); }

}  // namespace ctg

CTG_HOT_END

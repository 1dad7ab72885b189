// ctg::philox4x32_10, philox_uniform and name_hash (include/ctg/core/philox.hpp).
//
// Known answers: Random123's tests/kat_vectors (github.com/DEShawResearch/random123),
// the three "philox4x32 10" lines; columns are counter (4 words), key (2 words),
// expected output (4 words):
//   philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
//   philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
//   philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
// FNV-1a 32-bit: the published vectors "" -> 811c9dc5, "a" -> e40c292c, "foobar" -> bf9cf968.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <ctg/core/philox.hpp>

namespace {
using ctg::u32x4;
using u32 = std::uint32_t;

struct kat {
  u32x4 ctr;
  u32 k0, k1;
  u32x4 want;
};

constexpr kat kats[] = {
    {{{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u}}, 0x00000000u, 0x00000000u,
     {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
    {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
     {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
    {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
     {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
};

constexpr bool same(u32x4 a, u32x4 b) {
  return a.v[0] == b.v[0] && a.v[1] == b.v[1] && a.v[2] == b.v[2] && a.v[3] == b.v[3];
}

// Usable in constant expressions (the same code runs on the device).
static_assert(same(ctg::philox4x32_10(kats[2].ctr, kats[2].k0, kats[2].k1), kats[2].want));
static_assert(ctg::name_hash("foobar", 6) == 0xbf9cf968u);
}  // namespace

TEST_CASE("philox4x32_10 matches Random123's known-answer vectors") {
  for (const kat& k : kats) {
    const u32x4 got = ctg::philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) CHECK(got.v[i] == k.want.v[i]);
  }
}

TEST_CASE("philox_uniform: counter and key layout, top 24 bits") {
  // seed 0, step 0, stream 0, indices 0..3: the all-zero known answer, word by word.
  for (u32 i = 0; i < 4; ++i) {
    CHECK(ctg::philox_uniform(0, 0, 0, i) == static_cast<float>(kats[0].want.v[i] >> 8) * 0x1p-24f);
  }
  // The pi vector: counter (index/4 low, index/4 high, step, stream), key (seed low, seed high).
  // Its index/4 would need 66 bits, so check through a smaller block with the same low word.
  const std::uint64_t seed = (std::uint64_t{0x299f31d0u} << 32) | 0xa4093822u;
  const std::uint64_t block = (std::uint64_t{0x05a308d3u} << 32) | 0x243f6a88u;
  const u32x4 ctr{{0x243f6a88u, 0x05a308d3u, 0x13198a2eu, 0x03707344u}};
  const u32x4 words = ctg::philox4x32_10(ctr, 0xa4093822u, 0x299f31d0u);
  for (u32 i = 0; i < 4; ++i) {
    CHECK(ctg::philox_uniform(seed, 0x13198a2eu, 0x03707344u, block * 4 + i) ==
          static_cast<float>(words.v[i] >> 8) * 0x1p-24f);
  }
  // The largest value is 1 - 2^-24, never 1.
  CHECK(static_cast<float>(0xffffffffu >> 8) * 0x1p-24f < 1.0f);
}

TEST_CASE("philox_uniform: statistics of 10^6 values") {
  constexpr std::uint64_t n = 1000000;
  double sum = 0;
  std::uint64_t below = 0, out_of_range = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const float u = ctg::philox_uniform(0x0123456789abcdefull, 7, 3, i);
    if (!(u >= 0.0f && u < 1.0f)) ++out_of_range;
    sum += u;
    below += u < 0.1f ? 1 : 0;
  }
  CHECK(out_of_range == 0);
  // U(0,1): variance 1/12; the fraction below 0.1 is Bernoulli(0.1): variance 0.09.
  const double mean = sum / n, frac = static_cast<double>(below) / n;
  CHECK(std::fabs(mean - 0.5) <= 5 * std::sqrt(1.0 / 12 / n));
  CHECK(std::fabs(frac - 0.1) <= 5 * std::sqrt(0.09 / n));
}

TEST_CASE("philox_uniform: seed, step, stream and index each select a different stream") {
  constexpr int len = 256;
  auto stream_of = [](std::uint64_t seed, u32 step, u32 stream, std::uint64_t first) {
    std::vector<float> v(len);
    for (int i = 0; i < len; ++i) v[i] = ctg::philox_uniform(seed, step, stream, first + i);
    return v;
  };
  const std::vector<std::vector<float>> streams = {
      stream_of(1, 0, 0, 0),       stream_of(1, 1, 0, 0),       stream_of(1, 0, 1, 0),
      stream_of(2, 0, 0, 0),       stream_of(1ull << 32, 0, 0, 0), stream_of(1, 0, 0, len),
      stream_of(1, 0, 0, 1ull << 34),  // same low counter word as index 0, high word 1
  };
  // Two independent streams agree at a position with probability 2^-24.
  for (std::size_t a = 0; a < streams.size(); ++a) {
    for (std::size_t b = a + 1; b < streams.size(); ++b) {
      int equal = 0;
      for (int i = 0; i < len; ++i) equal += streams[a][i] == streams[b][i] ? 1 : 0;
      CAPTURE(a);
      CAPTURE(b);
      CHECK(equal == 0);
    }
  }
  // Repeating a call gives the same value (what recompute relies on).
  CHECK(ctg::philox_uniform(5, 6, 7, 8) == ctg::philox_uniform(5, 6, 7, 8));
}

TEST_CASE("name_hash is FNV-1a 32-bit") {
  CHECK(ctg::name_hash("", 0) == 0x811c9dc5u);
  CHECK(ctg::name_hash("a", 1) == 0xe40c292cu);
  CHECK(ctg::name_hash("foobar", 6) == 0xbf9cf968u);
  CHECK(ctg::name_hash("attn.dropout", 12) != ctg::name_hash("mlp.dropout", 11));
}

TEST_CASE("fnv1a64 (core/hash.hpp) matches the published FNV-1a 64-bit vectors, and continues a hash") {
  static_assert(ctg::fnv1a64("", 0) == 0xcbf29ce484222325ull);
  static_assert(ctg::fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
  static_assert(ctg::fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
  const unsigned char bytes[] = {'f', 'o', 'o', 'b', 'a', 'r'};
  CHECK(ctg::fnv1a64(bytes + 3, 3, ctg::fnv1a64(bytes, 3)) == ctg::fnv1a64("foobar", 6));
  CHECK(ctg::fnv1a32("foobar", 6) == ctg::name_hash("foobar", 6));
}

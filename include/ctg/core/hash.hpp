#pragma once
// FNV-1a (Fowler, Noll, Vo), 32 and 64 bits: a byte at a time, h = (h ^ byte) * prime.
// Stable across compilers and platforms, so its values may be stored (state
// files) or used as keys (dropout streams, initialisation).
//
//   std::uint32_t h = ctg::fnv1a32("attn.dropout", 12);
//   std::uint64_t h = ctg::fnv1a64(bytes, n);                 // from the offset basis
//   std::uint64_t h = ctg::fnv1a64(more, m, h);               // continue over more bytes
//
// constexpr and CTG_HD: usable at compile time, on the host and on a device.
#include <cstddef>
#include <cstdint>

#include <ctg/core/config.hpp>

namespace ctg {

namespace detail {
template <class Word>
struct fnv1a_constants;
template <>
struct fnv1a_constants<std::uint32_t> {
  static constexpr std::uint32_t offset_basis = 0x811C9DC5u;
  static constexpr std::uint32_t prime = 0x01000193u;
};
template <>
struct fnv1a_constants<std::uint64_t> {
  static constexpr std::uint64_t offset_basis = 0xCBF29CE484222325ull;
  static constexpr std::uint64_t prime = 0x00000100000001B3ull;
};

// FNV-1a over the n bytes at p, continuing from h. Byte is char, signed char or unsigned char.
template <class Word, class Byte>
CTG_HD constexpr Word fnv1a(const Byte* p, std::size_t n, Word h) noexcept {
  static_assert(sizeof(Byte) == 1, "ctg: fnv1a hashes bytes");
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= fnv1a_constants<Word>::prime;
  }
  return h;
}
}  // namespace detail

template <class Byte>
CTG_HD constexpr std::uint32_t fnv1a32(const Byte* p, std::size_t n,
                                       std::uint32_t h = detail::fnv1a_constants<std::uint32_t>::offset_basis) noexcept {
  return detail::fnv1a<std::uint32_t>(p, n, h);
}

template <class Byte>
CTG_HD constexpr std::uint64_t fnv1a64(const Byte* p, std::size_t n,
                                       std::uint64_t h = detail::fnv1a_constants<std::uint64_t>::offset_basis) noexcept {
  return detail::fnv1a<std::uint64_t>(p, n, h);
}

}  // namespace ctg

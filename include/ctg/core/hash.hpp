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

inline constexpr std::uint32_t fnv1a32_basis = 0x811C9DC5u;  // the offset bases: a hash of no bytes
inline constexpr std::uint64_t fnv1a64_basis = 0xCBF29CE484222325ull;

namespace detail {
// FNV-1a over the n bytes at p, continuing from h. Byte is char, signed char or unsigned char.
template <class Word, class Byte>
CTG_HD constexpr Word fnv1a(const Byte* p, std::size_t n, Word h) noexcept {
  static_assert(sizeof(Byte) == 1, "ctg: fnv1a hashes bytes");
  constexpr Word prime = sizeof(Word) == 4 ? Word(0x01000193u) : Word(0x00000100000001B3ull);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= prime;
  }
  return h;
}
}  // namespace detail

template <class Byte>
CTG_HD constexpr std::uint32_t fnv1a32(const Byte* p, std::size_t n, std::uint32_t h = fnv1a32_basis) noexcept {
  return detail::fnv1a<std::uint32_t>(p, n, h);
}

template <class Byte>
CTG_HD constexpr std::uint64_t fnv1a64(const Byte* p, std::size_t n, std::uint64_t h = fnv1a64_basis) noexcept {
  return detail::fnv1a<std::uint64_t>(p, n, h);
}

}  // namespace ctg

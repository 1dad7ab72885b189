#pragma once
// Deterministic parameter initialisation by name, for every stored leaf of a
// step (trainable and frozen):
//   "*.scale"  (norm gains)   1
//   "*.bias"                  0
//   anything else             normal(0, std), std = 0.02 by default (GPT-2)
// Each leaf's values depend only on (seed, leaf name, element index), so
// adding or reordering leaves does not change the others.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <ctg/core/error.hpp>
#include <ctg/core/hash.hpp>
#include <ctg/graph/step.hpp>

namespace ctg::nn {

}  // namespace ctg::nn

namespace ctg::detail {
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
constexpr bool ends_with(const char* s, const char* suffix) {
  std::size_t n = 0, m = 0;
  while (s[n]) ++n;
  while (suffix[m]) ++m;
  if (m > n) return false;
  for (std::size_t i = 0; i < m; ++i)
    if (s[n - m + i] != suffix[i]) return false;
  return true;
}
// A standard normal from two 53-bit uniforms (Box-Muller), keyed by (key, i).
inline double normal_at(std::uint64_t key, std::uint64_t i) {
  const std::uint64_t a = splitmix64(key ^ splitmix64(2 * i)), b = splitmix64(key ^ splitmix64(2 * i + 1));
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1p-53;  // (0, 1]
  const double u2 = static_cast<double>(b >> 11) * 0x1p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
}  // namespace ctg::detail

namespace ctg::nn {
// The values are made on the host, all of them, then uploaded, so any
// backend's store works and a call that throws (std::bad_alloc) writes no
// leaf. (One leaf per call of leaf_values / upload_values, not a lambda
// inside the loop over the step's leaves, whose name would spell them all:
// core/type_list.hpp.)
inline void check_init_std(double std_dev) {
  if (!std::isfinite(std_dev) || std_dev < 0.0)
    throw error("ctg: init_params: the standard deviation " + std::to_string(std_dev) +
                " is not a finite number >= 0; nothing was initialised");
}
template <class L>
inline constexpr bool initialised = !L::fed && L::role != leaf_role::state;  // (state starts as the store made it)

// Leaf L's values, as bytes (operator new aligns them for any dtype), after `out`'s.
template <class L>
void leaf_values(std::vector<std::vector<std::byte>>& out, std::uint64_t seed, double std_dev) {
  if constexpr (initialised<L>) {
    using T = typename L::dtype;
    std::vector<std::byte> bytes(L::dims::static_numel * sizeof(T));
    const char* name = L::name.c_str();
    const bool scale = detail::ends_with(name, ".scale"), bias = detail::ends_with(name, ".bias");
    const std::uint64_t key = detail::splitmix64(seed) ^ fnv1a64(name, L::name.size());
    for (std::size_t i = 0; i < L::dims::static_numel; ++i) {
      const T v = store_as<T>(scale ? 1.0 : bias ? 0.0 : std_dev * detail::normal_at(key, i));
      std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
    }
    out.push_back(std::move(bytes));
  }
}
template <class L, class Store>
void upload_values(Store& store, const std::vector<std::byte>*& next) {
  if constexpr (initialised<L>) {
    using T = typename L::dtype;
    store.upload(L{}, std::span<const T>(reinterpret_cast<const T*>(next->data()), L::dims::static_numel));
    ++next;
  }
}
template <step_store Store>
void init_params(Store& store, std::uint64_t seed, double std_dev = 0.02) {
  check_init_std(std_dev);
  // (A stack's parameters held in shards by dist::fsdp: an error before any
  // leaf is written.)
  if constexpr (requires { store.check_stacked_params_held(); }) store.check_stacked_params_held();
  using leaves = leaves_t<typename Store::step_type::nodes>;
  std::vector<std::vector<std::byte>> values;
  values.reserve(leaves::size);
  [&]<class... Ls>(tl::list<Ls...>) {
    (leaf_values<Ls>(values, seed, std_dev), ...);
  }(leaves{});
  const std::vector<std::byte>* next = values.data();
  [&]<class... Ls>(tl::list<Ls...>) {
    (upload_values<Ls>(store, next), ...);
  }(leaves{});
}

}  // namespace ctg::nn

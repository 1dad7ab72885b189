#pragma once
// Deterministic parameter initialisation by name, for every stored leaf of a
// step (trainable and frozen):
//   "*.scale"  (norm gains)   1
//   "*.bias"                  0
//   anything else             normal(0, std), std = 0.02 by default (GPT-2)
// Each leaf's values depend only on (seed, leaf name, element index), so
// adding or reordering leaves does not change the others.
#include <cmath>
#include <cstdint>
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
// The values are made on the host and uploaded, so any backend's store works.
// (One leaf per call of init_leaf, not a lambda inside the loop over the
// step's leaves, whose name would spell them all: core/type_list.hpp.)
inline void check_init_std(double std_dev) {
  if (!std::isfinite(std_dev) || std_dev < 0.0)
    throw error("ctg: init_params: the standard deviation " + std::to_string(std_dev) +
                " is not a finite number >= 0; nothing was initialised");
}
template <class L, class Store>
void init_leaf(Store& store, std::uint64_t seed, double std_dev) {
  check_init_std(std_dev);
  if constexpr (!L::fed && L::role != leaf_role::state) {  // state starts as the store made it
    std::vector<typename L::dtype> p(L::dims::static_numel);
    const char* name = L::name.c_str();
    const bool scale = detail::ends_with(name, ".scale"), bias = detail::ends_with(name, ".bias");
    const std::uint64_t key = detail::splitmix64(seed) ^ fnv1a64(name, L::name.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double v = scale ? 1.0 : bias ? 0.0 : std_dev * detail::normal_at(key, i);
      p[i] = store_as<typename L::dtype>(v);
    }
    store.upload(L{}, std::span<const typename L::dtype>(p));
  }
}
template <step_store Store>
void init_params(Store& store, std::uint64_t seed, double std_dev = 0.02) {
  check_init_std(std_dev);
  // (A stack's parameters held in shards by dist::fsdp: an error before any
  // leaf is written; the leaves before them were written, then it threw.)
  if constexpr (requires { store.check_stacked_params_held(); }) store.check_stacked_params_held();
  using nodes = typename Store::step_type::nodes;
  [&]<class... Ls>(tl::list<Ls...>) {
    (init_leaf<Ls>(store, seed, std_dev), ...);
  }(leaves_t<nodes>{});
}

}  // namespace ctg::nn

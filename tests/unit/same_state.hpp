#pragma once
// Bitwise comparison of two stores of the same step, for the tests that claim
// two runs are the same run (checkpointed or not, resumed or not):
//   same_state::check_same_leaves(a, b);   // every stored leaf: parameters and FP8 state
//   same_state::check_same_state(a, b);    // and every gradient
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <type_traits>

#include <ctg/ctg.hpp>

namespace same_state {

template <class Span>
bool same_bits(Span a, Span b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

template <class StoreA, class StoreB>
void check_same_leaves(StoreA& a, StoreB& b) {
  [&]<class... Ls>(ctg::tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (!L::fed) {
        INFO("leaf " << std::string(L::name.c_str()));
        CHECK(same_bits(a.template param<L>(), b.template param<L>()));
      }
    };
    (one(std::type_identity<Ls>{}), ...);
  }(ctg::leaves_t<typename StoreA::step_type::nodes>{});
}

template <class StoreA, class StoreB>
void check_same_state(StoreA& a, StoreB& b) {
  check_same_leaves(a, b);
  [&]<class... Ps>(ctg::tl::list<Ps...>) {
    auto one = [&]<class P>(std::type_identity<P>) {
      INFO("gradient of " << std::string(P::name.c_str()));
      CHECK(same_bits(a.template grad<P>(), b.template grad<P>()));
    };
    (one(std::type_identity<Ps>{}), ...);
  }(typename StoreA::step_type::wrt{});
}

}  // namespace same_state

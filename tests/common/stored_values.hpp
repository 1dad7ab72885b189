#pragma once
// Every stored leaf's bytes of a store, in the step's order (parameters,
// frozen leaves, FP8 state): what "the same state" means in the
// data-parallel tests.
#include <vector>

#include <ctg/dist/data_parallel.hpp>

namespace test_util {

template <class Store>
std::vector<unsigned char> all_values(Store& s) {
  std::vector<unsigned char> out;
  ctg::dist::detail::for_each_stored_leaf<typename Store::step_type>([&]<class L>() {
    const auto p = s.template param<L>();
    const auto* b = reinterpret_cast<const unsigned char*>(p.data());
    out.insert(out.end(), b, b + p.size_bytes());
  });
  return out;
}

}  // namespace test_util

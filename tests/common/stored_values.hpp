#pragma once
// Every stored leaf's bytes of a store, in the step's order (parameters,
// frozen leaves, FP8 state): what "the same state" means in the
// data-parallel tests.
#include <cstring>
#include <vector>

#include <ctg/dist/data_parallel.hpp>

namespace test_util {

template <class Store>
std::vector<unsigned char> all_values(Store& s) {
  std::vector<unsigned char> out;
  ctg::dist::detail::for_each_stored_leaf<typename Store::step_type>([&]<class L>() {
    const auto p = s.template param<L>();
    const std::size_t at = out.size();
    out.resize(at + p.size_bytes());  // (vector::insert of the bytes drew a false -Wstringop-overflow from GCC 12)
    if (p.size_bytes()) std::memcpy(out.data() + at, p.data(), p.size_bytes());
  });
  return out;
}

}  // namespace test_util

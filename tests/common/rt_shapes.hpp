#pragma once
// Run-time shapes for tests that call runners, plans and walks directly
// (tests/unit and tests/cuda): a shape from its dims, and a node's static
// shape with every ctg::dyn dim set to one size.
#include <cstddef>
#include <initializer_list>

#include <ctg/core/shape.hpp>

namespace test_shapes {

inline ctg::rt_shape dims(std::initializer_list<ctg::dim_t> d) {
  ctg::rt_shape s;
  for (ctg::dim_t x : d) s.d[s.rank++] = x;
  return s;
}

template <class N>
ctg::rt_shape dims_of(ctg::dim_t dyn_size) {
  ctg::rt_shape s;
  s.rank = N::dims::rank;
  for (std::size_t d = 0; d < s.rank; ++d) s.d[d] = N::dims::dims[d] == ctg::dyn ? dyn_size : N::dims::dims[d];
  return s;
}

}  // namespace test_shapes

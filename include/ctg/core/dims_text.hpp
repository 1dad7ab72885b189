#pragma once
// A shape's dims as text for error messages: "[3, 4]", "[]" for a scalar.
//
//   ctg::detail::dims_text(std::span<const ctg::dim_t>(dims, rank));
//   ctg::detail::dims_text(rt);   // an rt_shape
//
// Host only (it builds a std::string): for run-time errors, never in kernels.
#include <cstddef>
#include <span>
#include <string>

#include <ctg/core/shape.hpp>

namespace ctg::detail {

inline std::string dims_text(std::span<const dim_t> dims) {
  std::string t = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) t += (i ? ", " : "") + std::to_string(dims[i]);
  return t + "]";
}

inline std::string dims_text(const rt_shape& s) { return dims_text(std::span<const dim_t>(s.d, s.rank)); }

}  // namespace ctg::detail

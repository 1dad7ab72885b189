#pragma once
// A shape's dims as text for messages and drawings: "[3, 4]", "[]" for a scalar.
//
//   ctg::detail::dims_text(std::span<const ctg::dim_t>(dims, rank));
//   ctg::detail::dims_text(rt);   // an rt_shape
//   ctg::detail::dims_text(sv);   // a static shape (shape_value): ctg::dyn dims as "dyn", "[dyn, 64]"
//
// Host only (it builds a std::string): for run-time errors, never in kernels.
#include <cstddef>
#include <span>
#include <string>

#include <ctg/core/shape.hpp>

namespace ctg::detail {

// dyn_as_text: a dim equal to ctg::dyn is written "dyn" (static shapes only:
// a run-time size of -1 is an error to show as it is).
inline std::string dims_text(std::span<const dim_t> dims, bool dyn_as_text = false) {
  std::string t = "[";
  for (std::size_t i = 0; i < dims.size(); ++i)
    t += (i ? ", " : "") + (dyn_as_text && dims[i] == dyn ? std::string("dyn") : std::to_string(dims[i]));
  return t + "]";
}

inline std::string dims_text(const rt_shape& s) { return dims_text(std::span<const dim_t>(s.d, s.rank)); }

inline std::string dims_text(const shape_value& s) { return dims_text(std::span<const dim_t>(s.d, s.rank), true); }

}  // namespace ctg::detail

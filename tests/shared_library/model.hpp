#pragma once
// A model whose stores are made in a shared library built with hidden
// symbols (CMake's CXX_VISIBILITY_PRESET hidden) and in the program that
// links it: each holds its own copy of ctg's inline functions and their
// static variables.
#include <ctg/ctg.hpp>

namespace shared_library_test {
using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
using W = ctg::param<"w", ctg::f32, 4, 3>;
inline auto make_step() { return ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{}, W{})))); }
using store_t = decltype(ctg::make_store(std::declval<ctg::cpu::device&>(), make_step()));
}  // namespace shared_library_test

// (The library's one exported function.)
__attribute__((visibility("default"))) shared_library_test::store_t make_store_in_library(ctg::cpu::device& dev);

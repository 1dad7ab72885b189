#pragma once
// What a group runner sees of a store for one run: where every node's value
// is (its buffer, in the backend's memory), every node's run-time shape, and
// the key of the run's random streams. The store fills it (exec/buffers.hpp);
// every backend's runners read and write through it, and tests can fill one
// by hand to run a single group.
#include <array>
#include <cstddef>

#include <ctg/core/shape.hpp>
#include <ctg/graph/functors.hpp>

namespace ctg {

template <std::size_t N>
struct bindings {
  std::array<std::byte*, N> buf{};
  std::array<rt_shape, N> shape{};
  random_key key{};

  template <class T>
  T* as(std::size_t i) const {
    return reinterpret_cast<T*>(buf[i]);
  }
};

}  // namespace ctg

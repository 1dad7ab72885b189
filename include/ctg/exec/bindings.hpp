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
#include <ctg/lower/group.hpp>

namespace ctg {

// What a runner reads: the same, as pointers (runners are shared by steps
// of every size).
struct bindings_view {
  std::byte* const* buf = nullptr;
  const rt_shape* shape = nullptr;
  random_key key{};

  template <class T>
  T* as(std::size_t i) const {
    return reinterpret_cast<T*>(buf[i]);
  }
};

template <std::size_t N>
struct bindings {
  std::array<std::byte*, N> buf{};
  std::array<rt_shape, N> shape{};
  random_key key{};

  template <class T>
  T* as(std::size_t i) const {
    return reinterpret_cast<T*>(buf[i]);
  }
  bindings_view view() const { return {buf.data(), shape.data(), key}; }
};

// A group runner (exec/store.hpp): the group's call record, the run's
// bindings, the backend's scratch, and where a quantize records its amax
// (null: nowhere).
template <class Workspace>
using runner_t = void (*)(const group_call&, const bindings_view&, Workspace&, float* amax);

// What a group's runner will need of the backend's scratch for the run's
// shapes, reserved in the workspace before the step's first launch (the
// store calls one for every group, its stacks' blocks included), so a step
// allocates nothing once it runs.
template <class Workspace>
using scratch_sizer_t = void (*)(const group_call&, const bindings_view&, Workspace&);

}  // namespace ctg

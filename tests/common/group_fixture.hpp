#pragma once
// A fused group of a real graph, ready for the kernels' host code
// (tests/unit/cuda_*): group R of Step on `batch` rows (every ctg::dyn dim),
// its leaves filled with random values in [-3, 3], as the group's context
// and loop layout (what a kernel gets) and as bindings (what the CPU
// backend's runner gets). A dropout mask's slot has a place in the layout
// and no buffer. Slot `skewed` starts one element past a 64-byte boundary;
// every other buffer on one.
//
//   group_fixture<Step, R> g(batch, seed);
//   ... kernel host code on g.ctx, g.layout ...
//   std::vector<T> want = g.run_cpu();   // cpu::run_group's output (a side output's: g.cpu_side)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <ctg/ctg.hpp>

#include "rt_shapes.hpp"

namespace test_groups {

// Bytes whose data starts `skew` bytes past a 64-byte boundary.
class skewed_bytes {
 public:
  skewed_bytes(std::size_t n, std::size_t skew) : bytes_(n + 64 + skew) {
    const auto at = reinterpret_cast<std::uintptr_t>(bytes_.data());
    offset_ = (64 - at % 64) % 64 + skew;
  }
  std::byte* data() { return bytes_.data() + offset_; }

 private:
  std::vector<std::byte> bytes_;
  std::size_t offset_ = 0;
};

template <class Step, std::size_t R>
struct group_fixture {
  using nodes = typename Step::nodes;
  using info = ctg::detail::group_info<Step, R>;
  using Plan = ctg::kernel::fused_plan_t<Step, R>;
  using root = ctg::tl::at_t<R, nodes>;
  using T = typename root::dtype;
  using iter = ctg::tl::at_t<info::iteration_node, nodes>;
  static constexpr bool has_side = Plan::outputs::has_side;
  // The side output's dtype (a cast of the root the group writes too), std::byte when none.
  using S = std::conditional_t<has_side, typename Plan::side_dtype, std::byte>;

  ctg::rt_shape it, out_shape;
  typename Plan::context ctx;
  ctg::kernel::loop_layout<Plan::buffer_slots> layout;
  ctg::bindings<nodes::size> hb;
  std::vector<skewed_bytes> bufs;
  std::vector<S> cpu_side;  // the side output run_cpu wrote (has_side)

  group_fixture(ctg::dim_t batch, unsigned seed, int skewed = -1)
      : it(test_shapes::dims_of<iter>(batch)), out_shape(test_shapes::dims_of<root>(batch)) {
    ctx.key = hb.key = {7, (std::uint64_t{1} << 32) * 3 + 1, 5};
    layout.rank = it.rank;
    for (std::size_t d = 0; d < it.rank; ++d) layout.dims[d] = it.d[d];
    bufs.reserve(info::ninputs);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    [&]<std::size_t... S>(std::index_sequence<S...>) {
      auto one = [&]<std::size_t Slot>(std::integral_constant<std::size_t, Slot>) {
        constexpr std::size_t node = info::info.input[Slot];
        using N = ctg::tl::at_t<node, nodes>;
        const ctg::rt_shape s = test_shapes::dims_of<N>(batch);
        layout.set_slot(Slot, s.rank, s.d);
        hb.shape[node] = s;
        if constexpr (N::kind != ctg::node_kind::random) {  // (dropout's mask: computed, not read)
          static_assert(N::kind == ctg::node_kind::leaf, "a group fixture feeds leaves only");
          using E = typename N::dtype;
          const std::size_t n = static_cast<std::size_t>(s.numel());
          bufs.emplace_back(n * sizeof(E), static_cast<int>(Slot) == skewed ? sizeof(E) : 0);
          for (std::size_t i = 0; i < n; ++i) {
            const E v = ctg::store_as<E>(u(rng));
            std::memcpy(bufs.back().data() + i * sizeof(E), &v, sizeof(E));
          }
          ctx.ptr[Slot] = bufs.back().data();
          hb.buf[node] = bufs.back().data();
        }
      };
      (one(std::integral_constant<std::size_t, S>{}), ...);
    }(std::make_index_sequence<info::ninputs>{});
    layout = ctg::detail::launched_layout<Plan>(layout);  // (as a store launches it)
  }

  // The CPU backend's output of the group (its side output: in cpu_side).
  std::vector<T> run_cpu() {
    std::vector<T> out(static_cast<std::size_t>(out_shape.numel()));
    ctg::bindings<nodes::size> b = hb;
    b.shape[info::iteration_node] = it;
    b.shape[R] = out_shape;
    b.buf[R] = reinterpret_cast<std::byte*>(out.data());
    if constexpr (has_side) {
      constexpr std::size_t side = ctg::schedule<Step>::table.side[R];
      cpu_side.assign(out.size(), S{});
      b.shape[side] = out_shape;
      b.buf[side] = reinterpret_cast<std::byte*>(cpu_side.data());
    }
    ctg::cpu::workspace ws;
    ctg::cpu::run_group<Step, R>(b, ws);
    return out;
  }
};

// The fixture of the group rooted at Root (a node of Step).
template <class Step, class Root>
using fixture_of = group_fixture<Step, ctg::tl::index_of<Root, typename Step::nodes>::value>;

}  // namespace test_groups

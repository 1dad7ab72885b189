// The CUDA kernel of a reduction over other axes computes each output with
// cuda::axis_reduce_output (exec/cuda/axis_reduce_map.hpp), host and device
// code: run here on the CPU for every output of real groups, it must give
// the CPU backend's own runner's result (cpu::run_group) bit for bit.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/axis_reduce_map.hpp>

#include "../common/rt_shapes.hpp"

namespace {
using ctg::dim_t;

using test_shapes::dims_of;

// Group Root of Step (reading leaves only) on `batch` rows of random values.
template <class Step, class Root>
void check_group(Step, Root, dim_t batch) {
  using nodes = typename Step::nodes;
  constexpr std::size_t R = ctg::tl::index_of<Root, nodes>::value;
  using info = ctg::detail::group_info<Step, R>;
  static_assert(info::loop == ctg::loop_kind::axis_reduce);
  using Plan = ctg::kernel::fused_plan_t<Step, R>;
  using T = typename Root::dtype;
  using iter = ctg::tl::at_t<info::iteration_node, nodes>;
  const ctg::rt_shape it = dims_of<iter>(batch), os = dims_of<Root>(batch);

  typename Plan::context ctx;
  ctx.key = {7, 1, 0};
  ctg::kernel::loop_layout<Plan::slots> layout;
  layout.rank = it.rank;
  for (std::size_t d = 0; d < it.rank; ++d) layout.dims[d] = it.d[d];
  ctg::bindings<nodes::size> hb;
  hb.key = ctx.key;
  std::vector<std::vector<std::byte>> bufs;
  std::mt19937 rng(static_cast<unsigned>(batch));
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  [&]<std::size_t... S>(std::index_sequence<S...>) {
    auto one = [&]<std::size_t Slot>(std::integral_constant<std::size_t, Slot>) {
      constexpr std::size_t node = info::info.input[Slot];
      using N = ctg::tl::at_t<node, nodes>;
      static_assert(N::kind == ctg::node_kind::leaf, "this test feeds leaves only");
      using E = typename N::dtype;
      const ctg::rt_shape s = dims_of<N>(batch);
      std::vector<std::byte> h(static_cast<std::size_t>(s.numel()) * sizeof(E));
      for (std::size_t i = 0; i < h.size() / sizeof(E); ++i) {
        const E v = ctg::store_as<E>(u(rng));
        std::memcpy(h.data() + i * sizeof(E), &v, sizeof(E));
      }
      bufs.push_back(std::move(h));
      layout.set_slot(Slot, s.rank, s.d);
      ctx.ptr[Slot] = bufs.back().data();
      hb.shape[node] = s;
      hb.buf[node] = bufs.back().data();
    };
    bufs.reserve(sizeof...(S));
    (one(std::integral_constant<std::size_t, S>{}), ...);
  }(std::make_index_sequence<info::ninputs>{});

  std::vector<T> want(static_cast<std::size_t>(os.numel())), got(want.size());
  hb.shape[info::iteration_node] = it;
  hb.shape[R] = os;
  hb.buf[R] = reinterpret_cast<std::byte*>(want.data());
  ctg::cpu::workspace ws;
  ctg::cpu::run_group<Step, R>(hb, ws);

  const auto map = ctg::cuda::make_axis_reduce_map(it, os, !Plan::root_advances);
  REQUIRE(map.outputs == static_cast<dim_t>(want.size()));
  const double count = map.outputs ? static_cast<double>(it.numel()) / static_cast<double>(map.outputs) : 0.0;
  for (dim_t o = 0; o < map.outputs; ++o)
    got[static_cast<std::size_t>(o)] =
        ctg::store_as<T>(Plan::root_op::finalize(ctg::cuda::axis_reduce_output<Plan>(ctx, layout, map, o), count));
  std::size_t differ = 0;
  for (std::size_t i = 0; i < want.size(); ++i) differ += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
  INFO("batch ", batch);
  CHECK(differ == 0);
}

using X8 = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using B8 = ctg::param<"b", ctg::f32, 8>;
using X37 = ctg::input<"x", ctg::f32, ctg::dyn, 37>;
using X3d = ctg::input<"x", ctg::f32, ctg::dyn, 4, 8>;
using H3d = ctg::input<"h", ctg::bf16, ctg::dyn, 4, 8>;
}  // namespace

TEST_CASE("a reduction over other axes, as the CUDA kernel computes it: the CPU's bits") {
  for (dim_t batch : {dim_t{0}, dim_t{1}, dim_t{7}, dim_t{300}}) {
    auto over_batch = ctg::sum<0>(X8{} * B8{} + ctg::lit<1.0>);
    check_group(ctg::forward(over_batch), over_batch, batch);
    auto middle = ctg::max<1>(ctg::tanh(X3d{}));
    check_group(ctg::forward(middle), middle, batch);
    auto bf16_mean = ctg::mean<0>(ctg::exp(H3d{}) * ctg::lit<0.5>);
    check_group(ctg::forward(bf16_mean), bf16_mean, batch);
    auto everything = ctg::mean(ctg::square(X37{}));  // the last axis too: rows combined first
    check_group(ctg::forward(everything), everything, batch);
    auto bare = ctg::sum<1>(X3d{});  // a bare read (the CPU's block path)
    check_group(ctg::forward(bare), bare, batch);
  }
}

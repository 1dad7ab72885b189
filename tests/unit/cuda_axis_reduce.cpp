// The CUDA kernels of a reduction over other axes compute each output with
// cuda::axis_reduce_output over chunks of its visits and
// cuda::combine_chunks (exec/cuda/axis_reduce_map.hpp), host and device
// code, run here on the CPU for every output of real groups against the CPU
// backend's own runner (cpu::run_group): one chunk per output gives the
// CPU's bits (the same f64 sequence); the kernels' chunks give them within
// one unit in the last place of the output's dtype (the f64 sums differ by
// rounding only; none of these sums cancels), and exactly for max.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/axis_reduce_map.hpp>

#include "../common/group_fixture.hpp"
#include "../common/ulp.hpp"

namespace {
using ctg::dim_t;

int chunked_groups = 0;  // (groups whose outputs were also computed V at a time)
int lane_groups = 0;     // (groups whose rows were also combined in lanes)

// The kernel's row_lanes (exec/cuda/fused_kernel.cuh) on the CPU: 16
// threads' lane_part values, folded as its shuffles fold them (every lane u
// at once takes lane u + w's value, for w = 8, 4, 2, 1; lane 0's is the row's).
struct host_row_lanes {
  template <class R, class Ctx>
  static double combine(const Ctx& c, dim_t L) {
    double lane[R::lanes];
    for (dim_t u = 0; u < R::lanes; ++u) lane[u] = R::lane_part(c, L, u);
    for (dim_t w = R::lanes / 2; w >= 1; w /= 2)  // (in increasing u: lane u + w is not yet updated)
      for (dim_t u = 0; u + w < R::lanes; ++u) lane[u] = R::op::combine(lane[u], lane[u + w]);
    return lane[0];
  }
};

// Group Root of Step (reading leaves only) on `batch` rows of random values.
template <class Step, class Root>
void check_group(Step, Root, dim_t batch) {
  test_groups::fixture_of<Step, Root> g(batch, static_cast<unsigned>(batch));
  using F = decltype(g);
  static_assert(F::info::loop == ctg::loop_kind::axis_reduce);
  using Plan = typename F::Plan;
  using T = typename F::T;
  const ctg::rt_shape &it = g.it, &os = g.out_shape;
  const auto& ctx = g.ctx;
  const auto& layout = g.layout;
  const std::vector<T> want = g.run_cpu();
  std::vector<T> got(want.size());

  const auto map = ctg::cuda::make_axis_reduce_map(it, os, !Plan::root_advances);
  REQUIRE(map.outputs == static_cast<dim_t>(want.size()));
  const double count = map.outputs ? static_cast<double>(it.numel()) / static_cast<double>(map.outputs) : 0.0;
  using Op = typename Plan::root_op;
  INFO("batch ", batch);
  // One chunk per output: the CPU's sequence.
  for (dim_t o = 0; o < map.outputs; ++o)
    got[static_cast<std::size_t>(o)] = ctg::store_as<T>(
        Op::finalize(ctg::cuda::axis_reduce_output<Plan>(ctx, layout, map, o, 0, map.per_output), count));
  std::size_t differ = 0;
  for (std::size_t i = 0; i < want.size(); ++i) differ += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
  CHECK(differ == 0);
  // The kernels' chunks, as they split this shape.
  const ctg::cuda::axis_reduce_split split = ctg::cuda::axis_reduce_split_for<Plan>(map);
  std::vector<double> partials(static_cast<std::size_t>(split.chunks * map.outputs));
  for (dim_t c = 0; c < split.chunks; ++c)
    for (dim_t o = 0; o < map.outputs; ++o)
      partials[static_cast<std::size_t>(c * map.outputs + o)] = ctg::cuda::axis_reduce_output<Plan>(
          ctx, layout, map, o, split.first(c), split.end(c, map.per_output));
  std::size_t beyond_ulp = 0;
  differ = 0;
  for (dim_t o = 0; o < map.outputs; ++o) {
    const T v = ctg::store_as<T>(
        Op::finalize(ctg::cuda::combine_chunks<Op>(partials.data(), split.chunks, map.outputs, o), count));
    const std::size_t i = static_cast<std::size_t>(o);
    if (std::memcmp(&v, &want[i], sizeof(T)) == 0) continue;
    ++differ;
    beyond_ulp += !test_ulp::within_one_ulp(v, want[i]);
  }
  INFO("chunks ", split.chunks, " of ", split.chunk, " visits");
  CHECK(beyond_ulp == 0);
  if (std::is_same_v<Op, ctg::op::max_r>) CHECK(differ == 0);

  // Outputs V at a time where the kernel takes them so (each visited row's V
  // values read ahead, as 16-byte loads do): the bits of each output's own walk.
  if constexpr (Plan::root_advances && ctg::cuda::plan_chunk<Plan> > 1) {
    constexpr dim_t V = ctg::cuda::plan_chunk<Plan>;
    if (ctg::cuda::axis_reduce_chunks<Plan>(map)) {
      CHECK(ctg::cuda::chunk_width<Plan>(ctx, layout, {got.data(), nullptr}) == V);
      ++chunked_groups;
      std::size_t differ_chunked = 0;
      for (dim_t c = 0; c < split.chunks; ++c)
        for (dim_t o = 0; o < map.outputs; o += V) {
          double acc[V];
          ctg::cuda::axis_reduce_outputs<Plan, V>(ctx, layout, map, o, 1, V, split.first(c),
                                                  split.end(c, map.per_output), acc, true);
          const auto at = static_cast<std::size_t>(c * map.outputs + o);
          differ_chunked += std::memcmp(acc, &partials[at], sizeof acc) != 0;
        }
      CHECK(differ_chunked == 0);
    }
  }

  // Rows combined by 16 threads, a lane each, where the kernel does so: each
  // chunk's bits as one thread's.
  if constexpr (ctg::cuda::rows_in_lanes<Plan>) {
    ++lane_groups;
    std::size_t differ_lanes = 0;
    for (dim_t c = 0; c < split.chunks; ++c)
      for (dim_t o = 0; o < map.outputs; ++o) {
        const double v = ctg::cuda::axis_reduce_output<Plan>(ctx, layout, map, o, split.first(c),
                                                             split.end(c, map.per_output), host_row_lanes{});
        differ_lanes += std::memcmp(&v, &partials[static_cast<std::size_t>(c * map.outputs + o)], sizeof v) != 0;
      }
    CHECK(differ_lanes == 0);
  }

  // The kernel's own mapping of work to threads (tiles of output rows where
  // they apply; blocks of 3 and 4 threads, so that rows of 8 make tiles):
  // every chunk of every output written once, with the bits of its walk alone.
  for (unsigned threads : {3u, 4u, 256u}) {
    std::vector<double> tiled(partials.size());
    std::vector<int> writes(partials.size(), 0);
    bool tiled_here = false;
    if constexpr (Plan::root_advances) {
      if (ctg::cuda::axis_reduce_tiling::applies<Plan>(map, threads)) {
        tiled_here = true;
        constexpr unsigned N = ctg::cuda::tile_elements_per_thread;
        const ctg::cuda::axis_reduce_tiling tiling(map, split, threads);
        for (dim_t tile = 0; tile < tiling.tiles.count; ++tile)
          for (unsigned t = 0; t < threads; ++t) {
            const auto w = tiling.at(tile, t);
            double acc[N];
            ctg::cuda::axis_reduce_outputs<Plan, N>(ctx, layout, map, w.output, threads, w.n, split.first(w.chunk),
                                                    split.end(w.chunk, map.per_output), acc);
            for (unsigned k = 0; k < w.n; ++k) {
              const auto i = static_cast<std::size_t>(w.chunk * map.outputs + w.output + k * threads);
              tiled[i] = acc[k];
              ++writes[i];
            }
          }
      }
    }
    if (!tiled_here) {  // (one thread per chunk of one output: the partials above)
      tiled = partials;
      std::fill(writes.begin(), writes.end(), 1);
    }
    INFO("blocks of ", threads, " threads");
    CHECK(std::count(writes.begin(), writes.end(), 1) == static_cast<std::ptrdiff_t>(writes.size()));
    CHECK(std::memcmp(tiled.data(), partials.data(), partials.size() * sizeof(double)) == 0);
  }
}

using X8 = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using B8 = ctg::param<"b", ctg::f32, 8>;
using X37 = ctg::input<"x", ctg::f32, ctg::dyn, 37>;
using X3d = ctg::input<"x", ctg::f32, ctg::dyn, 4, 8>;
using H3d = ctg::input<"h", ctg::bf16, ctg::dyn, 4, 8>;
using X4d = ctg::input<"x", ctg::f32, ctg::dyn, 4, 6, 8>;
using S8 = ctg::input<"s", ctg::f32, ctg::dyn, 8, 8>;
}  // namespace

TEST_CASE("a reduction over other axes, as the CUDA kernels compute it, against the CPU's") {
  for (dim_t batch : {dim_t{0}, dim_t{1}, dim_t{7}, dim_t{300}, dim_t{20000}}) {
    auto over_batch = ctg::sum<0>(X8{} * B8{} + ctg::lit<1.0>);
    // Dropout in a reduction's group (the fixture's step has a high word: 64-bit keys).
    auto dover = ctg::sum<0>(ctg::dropout<"d3">(X8{} * B8{}, ctg::lit<0.15>));
    check_group(ctg::forward(dover), dover, batch);
    auto deverything = ctg::mean(ctg::dropout<"d4">(ctg::square(X37{}), ctg::lit<0.1>));
    check_group(ctg::forward(deverything), deverything, batch);
    auto dmiddle = ctg::sum<1>(ctg::dropout<"d5">(X3d{}, ctg::lit<0.5>));
    check_group(ctg::forward(dmiddle), dmiddle, batch);
    check_group(ctg::forward(over_batch), over_batch, batch);
    auto middle = ctg::max<1>(ctg::tanh(X3d{}));
    check_group(ctg::forward(middle), middle, batch);
    auto bf16_mean = ctg::mean<0>(ctg::exp(H3d{}) * ctg::lit<0.5>);
    check_group(ctg::forward(bf16_mean), bf16_mean, batch);
    auto everything = ctg::mean(ctg::square(X37{}));  // the last axis too: rows combined first
    check_group(ctg::forward(everything), everything, batch);
    auto bare = ctg::sum<1>(X3d{});  // a bare read (the CPU's block path)
    check_group(ctg::forward(bare), bare, batch);
    // The batch and a middle axis: two walked dims, chunks that start and end inside them.
    auto two_runs = ctg::sum_to<ctg::shape<4, 1, 8>>(X4d{} * ctg::lit<0.5>);
    check_group(ctg::forward(two_runs), two_runs, batch);
    // The walk moves along the rows' own axis: an index-aware body sees each visit's row.
    auto masked = ctg::sum<1>(ctg::exp(ctg::causal_mask(S8{})));
    check_group(ctg::forward(masked), masked, batch);
  }
  CHECK(chunked_groups >= 5 * 4);  // (five of the groups keep rows of 8, at every batch but the empty one)
  CHECK(lane_groups == 10);        // (the two means of everything, at every batch)
  // A dyn last dim fed 1: the loop's rows are 1 long, so the outputs do not
  // lie in rows of the kept dim before it. (Tiles took them so: 44 of 300
  // outputs read other outputs' values, an operand broadcast along the
  // middle read past its buffer.)
  using XL = ctg::input<"x", ctg::f32, 6, 300, ctg::dyn>;
  using CL = ctg::input<"c", ctg::f32, 6, 300, 1>;
  using ML = ctg::input<"m", ctg::f32, 6, 1, ctg::dyn>;
  for (dim_t last : {dim_t{1}, dim_t{3}}) {
    auto scaled = ctg::sum<0>(XL{} * CL{});
    check_group(ctg::forward(scaled), scaled, last);
    auto shifted = ctg::sum<0>(XL{} + ML{});
    check_group(ctg::forward(shifted), shifted, last);
  }
}

namespace {
// The plan of Root's group in Step, and its map over `it` (no data).
template <class Step, class Root>
using plan_of = ctg::kernel::fused_plan_t<Step, ctg::tl::index_of<Root, typename Step::nodes>::value>;
}  // namespace

TEST_CASE("a norm scale's gradient keeps the GPU busy: the kernel's threads, not its sums, set the split") {
  // A sum over 8192 rows of a product, as a norm's scale gradient is (an
  // f32 product under autocast: 4 outputs a thread in 16-byte chunks; bf16:
  // 8), at GPT-2's width 768 and at 4096. Splitting for 2^16 sums gave
  // 16384 and 16512 threads in f32 (64 blocks of 256 on a GPU of 132 SMs),
  // 8192 and 8256 in bf16, each walking 512 or 96 rows.
  using Xw = ctg::input<"x", ctg::bf16, 8192, 4096>;
  using Gw = ctg::input<"g", ctg::bf16, 8192, 4096>;
  using Xn = ctg::input<"x", ctg::bf16, 8192, 768>;
  using Gn = ctg::input<"g", ctg::bf16, 8192, 768>;
  auto wide = ctg::sum<0>(Xw{} * Gw{});
  auto narrow = ctg::sum<0>(Xn{} * Gn{});
  auto wide_f32 = ctg::sum<0>(ctg::cast<ctg::f32>(Xw{}) * ctg::cast<ctg::f32>(Gw{}));
  auto narrow_f32 = ctg::sum<0>(ctg::cast<ctg::f32>(Xn{}) * ctg::cast<ctg::f32>(Gn{}));
  auto check = [&]<class Step, class Root>(Step, Root, dim_t V, dim_t width, std::size_t least) {
    using Plan = plan_of<Step, Root>;
    CHECK(ctg::cuda::plan_chunk<Plan> == V);
    const dim_t n = Root::dims::dims[1];
    const auto map = ctg::cuda::make_axis_reduce_map({{8192, n}, 2}, {{1, n}, 2}, false);
    REQUIRE(ctg::cuda::axis_reduce_chunks<Plan>(map));
    const auto split = ctg::cuda::axis_reduce_split_for<Plan>(map);
    INFO(map.outputs, " outputs: ", split.chunks, " chunks of ", split.chunk, " rows");
    CHECK(ctg::cuda::axis_reduce_threads<Plan>(map, split, width) >= least);
    CHECK(split.chunk >= ctg::cuda::axis_reduce_min_chunk);
  };
  check(ctg::forward(wide), wide, 8, 8, std::size_t{1} << 17);
  check(ctg::forward(narrow), narrow, 8, 8, std::size_t{48} << 10);  // (chunks of 16 rows at the least: 512 x 96)
  check(ctg::forward(wide_f32), wide_f32, 4, 4, std::size_t{1} << 17);
  check(ctg::forward(narrow_f32), narrow_f32, 4, 4, std::size_t{96} << 10);  // (512 x 192)
  // Unaligned buffers (element by element) walk the same chunks, in tiles of 4 outputs a thread.
  check(ctg::forward(wide), wide, 8, 1, std::size_t{1} << 17);
}

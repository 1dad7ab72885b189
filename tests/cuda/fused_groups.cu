// Fusion groups of real graphs run as CUDA kernels (exec/cuda/fused_kernel.cuh)
// and compared with the same group run by the CPU backend's runner
// (ctg::cpu::run_group: reductions in row order): elementwise groups bit
// for bit; groups with sums within 1 ulp of their dtype (a block reduction
// adds in a tree, a reduction over other axes in chunks, not in row order;
// the f64 sums differ by rounding only), max exactly.
//
// The graphs are built by deduction (auto), never spelled with leaf names in
// a template argument list: nvcc's host pass cannot write those back
// (README, "The CUDA backend"). The kernels themselves are instantiated on
// name-free bodies only.
// Without a GPU: prints why and returns 77 (ctest: skipped).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/fused_kernel.cuh>

#include "../common/rt_shapes.hpp"
#include "../common/ulp.hpp"
#include "device_test.hpp"

namespace {

using ctg::dim_t;
namespace k = ctg::kernel;

using test_shapes::dims_of;

struct device_bytes {
  ctg::cuda::arena mem;
  explicit device_bytes(std::size_t n) { mem.reserve(n + 16); }
};

struct outcome {
  std::size_t n = 0, differ = 0, beyond_ulp = 0;
};

// got against want: bitwise, or within 1 ulp.
template <class T>
void compare(const std::vector<T>& got, const std::vector<T>& want, outcome& o) {
  o.n += got.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float a = ctg::load_as<T>(got[i]), b = ctg::load_as<T>(want[i]);
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0 || (a != a && b != b)) continue;
    ++o.differ;
    if (!test_ulp::within_one_ulp(got[i], want[i])) ++o.beyond_ulp;
  }
}

// Group `Root` of `Step` (whose slots are all leaves or masks) on `batch`
// rows: random leaf values, the kernel's output against the host's (and its
// side output's, a cast of the root the group writes too, where it has one).
template <class Step, class Root>
outcome run_group(const ctg::cuda::device& dev, dim_t batch, std::uint32_t seed) {
  using nodes = typename Step::nodes;
  constexpr std::size_t R = ctg::tl::index_of<Root, nodes>::value;
  using info = ctg::detail::group_info<Step, R>;
  constexpr std::size_t K = info::ninputs > 0 ? info::ninputs : 1;
  constexpr std::size_t NR = info::nreductions > 0 ? info::nreductions : 1;
  using T = typename Root::dtype;
  using iter = ctg::tl::at_t<info::iteration_node, nodes>;
  using Plan = ctg::kernel::fused_plan_t<Step, R>;
  constexpr bool has_side = Plan::outputs::has_side;
  using S = std::conditional_t<has_side, typename Plan::side_dtype, std::byte>;

  ctg::kernel::loop_layout<K> layout;
  {
    const auto d = dims_of<iter>(batch);
    layout.rank = d.rank;
    for (std::size_t i = 0; i < d.rank; ++i) layout.dims[i] = d.d[i];
  }
  k::context<K, NR> host_ctx, dev_ctx;
  host_ctx.key = dev_ctx.key = {2026, 3, 1};
  std::vector<std::vector<std::byte>> host_bufs;
  std::vector<device_bytes> dev_bufs;
  host_bufs.reserve(K);
  dev_bufs.reserve(K);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  [&]<std::size_t... S>(std::index_sequence<S...>) {
    auto one = [&]<std::size_t Slot>(std::integral_constant<std::size_t, Slot>) {
      using N = ctg::tl::at_t<info::info.input[Slot], nodes>;
      const auto d = dims_of<N>(batch);
      layout.set_slot(Slot, d.rank, d.d);
      if constexpr (N::kind == ctg::node_kind::leaf) {
        using E = typename N::dtype;
        const std::size_t n = static_cast<std::size_t>(d.numel());
        std::vector<std::byte> h(n * sizeof(E));
        for (std::size_t i = 0; i < n; ++i) {
          const E v = ctg::store_as<E>(u(rng));
          std::memcpy(h.data() + i * sizeof(E), &v, sizeof(E));
        }
        dev_bufs.emplace_back(h.size());
        CTG_CUDA_CHECK(cudaMemcpy(dev_bufs.back().mem.data(), h.data(), h.size(), cudaMemcpyHostToDevice));
        host_bufs.push_back(std::move(h));
        host_ctx.ptr[Slot] = host_bufs.back().data();
        dev_ctx.ptr[Slot] = dev_bufs.back().mem.data();
      } else {
        static_assert(N::kind == ctg::node_kind::random, "this test feeds leaves only");
      }
    };
    (one(std::integral_constant<std::size_t, S>{}), ...);
  }(std::make_index_sequence<info::ninputs>{});

  constexpr bool row_root = info::loop == ctg::loop_kind::row_reduce;
  constexpr bool axis_root = info::loop == ctg::loop_kind::axis_reduce;
  const dim_t L = layout.row_length(), rows = layout.rows();
  const std::size_t out_n =
      static_cast<std::size_t>(axis_root ? dims_of<Root>(batch).numel() : row_root ? rows : rows * L);

  // The host reference is the CPU backend's own runner for this group.
  std::vector<T> want(out_n);
  ctg::bindings<nodes::size> hb;
  hb.key = host_ctx.key;
  [&]<std::size_t... S>(std::index_sequence<S...>) {
    ((hb.shape[info::info.input[S]] = dims_of<ctg::tl::at_t<info::info.input[S], nodes>>(batch),
      hb.buf[info::info.input[S]] = const_cast<std::byte*>(host_ctx.ptr[S])),
     ...);
  }(std::make_index_sequence<info::ninputs>{});
  hb.shape[info::iteration_node] = dims_of<iter>(batch);
  hb.shape[R] = dims_of<Root>(batch);
  hb.buf[R] = reinterpret_cast<std::byte*>(want.data());
  std::vector<S> want_side(has_side ? out_n : 0);
  if constexpr (has_side) {
    hb.shape[ctg::schedule<Step>::table.side[R]] = dims_of<Root>(batch);
    hb.buf[ctg::schedule<Step>::table.side[R]] = reinterpret_cast<std::byte*>(want_side.data());
  }
  ctg::cpu::workspace ws;
  ctg::cpu::run_group<Step, R>(hb, ws);

  device_bytes out(out_n * sizeof(T)), side_out(out_n * sizeof(S));
  ctg::cuda::arena partials;  // (as a store's workspace makes it: at its largest, before any launch)
  partials.reserve(static_cast<std::size_t>(ctg::cuda::axis_reduce_max_partials) * sizeof(double));
  typename Plan::outputs outputs;
  outputs.root = reinterpret_cast<T*>(out.mem.data());
  if constexpr (has_side) outputs.side = reinterpret_cast<S*>(side_out.mem.data());
  if constexpr (axis_root)
    ctg::cuda::launch_axis_reduce<Plan>(dev, dev_ctx, layout, dims_of<iter>(batch), dims_of<Root>(batch),
                                        outputs.root, partials);
  else
    ctg::cuda::launch_fused<Plan>(dev, dev_ctx, layout, outputs);
  dev.synchronize();
  std::vector<T> got(out_n);
  CTG_CUDA_CHECK(cudaMemcpy(got.data(), out.mem.data(), out_n * sizeof(T), cudaMemcpyDeviceToHost));

  outcome o;
  compare(got, want, o);
  if constexpr (has_side) {
    std::vector<S> got_side(out_n);
    CTG_CUDA_CHECK(cudaMemcpy(got_side.data(), side_out.mem.data(), out_n * sizeof(S), cudaMemcpyDeviceToHost));
    compare(got_side, want_side, o);
  }
  return o;
}

template <class Step, class Root>
bool check(const ctg::cuda::device& dev, const char* what, Step, Root, bool bitwise) {
  bool ok = true;
  for (dim_t batch : {dim_t{1}, dim_t{7}, dim_t{1000}}) {
    const outcome o = run_group<Step, Root>(dev, batch, static_cast<std::uint32_t>(batch));
    const bool pass = bitwise ? o.differ == 0 : o.beyond_ulp == 0;
    std::printf("%-34s batch %5ld: %8zu outputs, %zu differ (%zu by more than 1 ulp): %s\n", what,
                static_cast<long>(batch), o.n, o.differ, o.beyond_ulp, pass ? "ok" : "WRONG");
    ok = ok && pass;
  }
  return ok;
}

using X8 = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using Bias8 = ctg::param<"b", ctg::f32, 8>;
using X37 = ctg::input<"x", ctg::f32, ctg::dyn, 37>;
using H8 = ctg::input<"h", ctg::bf16, ctg::dyn, 8>;
using X300 = ctg::input<"x", ctg::f32, ctg::dyn, 300>;
using X3000 = ctg::input<"x", ctg::f32, ctg::dyn, 3000>;
using X5000 = ctg::input<"x", ctg::f32, ctg::dyn, 5000>;
using X3d = ctg::input<"x", ctg::f32, ctg::dyn, 4, 8>;
using H3d = ctg::input<"h", ctg::bf16, ctg::dyn, 4, 8>;
using Heads = ctg::input<"h", ctg::bf16, ctg::dyn, 12, 4, 768>;
using W300 = ctg::param<"w", ctg::bf16, 300, 8>;
using W3000 = ctg::param<"w", ctg::bf16, 3000, 8>;

// A forward step in which y and its bf16 cast are each read by another group
// (a sum over rows; a product): the cast is the side output of y's group.
template <class Y, class W>
auto side_cast_step(Y y, W w) {
  auto step = ctg::forward(ctg::sum(ctg::sum<0>(y)) + ctg::sum(ctg::cast<ctg::f32>(ctg::matmul(ctg::cast<ctg::bf16>(y), w))));
  using St = decltype(step);
  static_assert(ctg::schedule<St>::table.side[ctg::tl::index_of<Y, typename St::nodes>::value] != ctg::detail::no_node,
                "the cast is a side output");
  return step;
}

}  // namespace

int main() {
  return run_device_test([](const ctg::cuda::device& dev) {
    bool ok = true;
    {
      auto y = ctg::exp(X8{} * ctg::lit<0.5> + Bias8{});  // a broadcast bias: elementwise group
      ok = check(dev, "exp(x * 0.5 + b)", ctg::forward(y), y, true) && ok;
    }
    {
      auto y = ctg::dropout<"drop">(ctg::tanh(H8{}), ctg::lit<0.25>);  // bf16, a Philox mask
      ok = check(dev, "dropout(tanh(h)), bf16", ctg::forward(y), y, true) && ok;
    }
    {
      auto y = ctg::softmax<1>(X37{});  // two inlined row reductions
      ok = check(dev, "softmax<1>(x), rows of 37", ctg::forward(y), y, false) && ok;
    }
    {
      // Rows longer than a warp takes (cuda::rows_take_a_warp): a block per
      // row, with the row cache (up to 4096) and without.
      auto y = ctg::softmax<1>(X3000{});
      ok = check(dev, "softmax<1>(x), rows of 3000", ctg::forward(y), y, false) && ok;
      auto z = ctg::softmax<1>(X5000{});
      ok = check(dev, "softmax<1>(x), rows of 5000", ctg::forward(z), z, false) && ok;
    }
    {
      // Side outputs: a value and its cast, each read by another group, in one
      // loop (an elementwise group in 16-byte chunks; attention's softmax and
      // its bf16 cast, a warp per row and a block per row).
      auto e = ctg::tanh(X300{} * X300{});
      ok = check(dev, "tanh(x * x) and its bf16 cast", side_cast_step(e, W300{}), e, true) && ok;
      auto p = ctg::softmax<1>(X300{});
      ok = check(dev, "softmax<1>(x) and its bf16 cast", side_cast_step(p, W300{}), p, false) && ok;
      auto q = ctg::softmax<1>(X3000{});
      ok = check(dev, "softmax<1>(x), rows of 3000, and cast", side_cast_step(q, W3000{}), q, false) && ok;
    }
    {
      auto y = ctg::mean<1>(ctg::square(X300{}));  // a row reduction as the root
      ok = check(dev, "mean<1>(square(x)), rows of 300", ctg::forward(y), y, false) && ok;
    }
    {
      // A constant that 15 significant digits do not give back: as a double
      // template argument, nvcc registered another kernel than it launched.
      auto y = X8{} * ctg::lit<0.17677669529663687>;  // 1/sqrt(32)
      ok = check(dev, "x * 1/sqrt(32)", ctg::forward(y), y, true) && ok;
    }
    // Reductions over other axes: chunks of visits in parallel (batch 1000:
    // 1000 chunks of one row each), so sums within 1 ulp; max exactly.
    {
      auto y = ctg::sum<0>(X8{} * Bias8{} + ctg::lit<1.0>);  // over the batch (the bias gradient's shape)
      ok = check(dev, "sum<0>(x * b + 1)", ctg::forward(y), y, false) && ok;
    }
    {
      auto y = ctg::max<1>(ctg::tanh(X3d{}));  // a middle axis
      ok = check(dev, "max<1>(tanh(x)), [batch, 4, 8]", ctg::forward(y), y, true) && ok;
    }
    {
      auto y = ctg::mean<0>(ctg::exp(H3d{}) * ctg::lit<0.5>);  // bf16 over the batch
      ok = check(dev, "mean<0>(exp(h) * 0.5), bf16", ctg::forward(y), y, false) && ok;
    }
    {
      auto y = ctg::mean(ctg::square(X37{}));  // everything: the last axis by rows
      ok = check(dev, "mean(square(x)), a scalar", ctg::forward(y), y, false) && ok;
    }
    {
      auto y = ctg::sum<0>(ctg::square(X300{}));  // 300 outputs, 219 chunks of 5 rows at batch 1000
      ok = check(dev, "sum<0>(square(x)), [batch, 300]", ctg::forward(y), y, false) && ok;
    }
    {
      // Attention's sum over heads: rows of 768 outputs, each thread walks
      // several outputs of a row at once (cuda::axis_reduce_tiling).
      auto y = ctg::sum<1>(Heads{});
      ok = check(dev, "sum<1>(h), [batch, 12, 4, 768] bf16", ctg::forward(y), y, false) && ok;
    }
    return ok;
  });
}

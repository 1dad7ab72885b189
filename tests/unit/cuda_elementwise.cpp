// An elementwise group's CUDA kernel runs cuda::elementwise_thread in every
// thread (exec/cuda/elementwise_thread.hpp, host and device code). Here every
// thread of launches of several block sizes and grids runs on the CPU, in
// 16-byte chunks (lower/read_ahead.hpp) and element by element, against the
// CPU backend's own runner (cpu::run_group): the same bits, every element
// written. Where a row's length or a buffer's address rules chunks out,
// chunk_width says so.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/elementwise_thread.hpp>

#include "../common/rt_shapes.hpp"

namespace {
using ctg::dim_t;
using test_shapes::dims_of;

// A buffer whose data starts `skew` bytes past a 64-byte boundary.
struct skewed_buffer {
  std::vector<std::byte> bytes;
  std::size_t skew = 0;
  skewed_buffer(std::size_t n, std::size_t skew_bytes) : bytes(n + 64 + skew_bytes) {
    const auto at = reinterpret_cast<std::uintptr_t>(bytes.data());
    skew = (64 - at % 64) % 64 + skew_bytes;
  }
  std::byte* data() { return bytes.data() + skew; }
};

// Group Root of Step (reading leaves only) on `batch` rows of random values;
// input `skewed_input` (if any) and the output, when `skew_output`, start one
// element past an aligned address. Expects chunks where `expect_chunks`.
template <class Step, class Root>
void check_group(Step, Root, dim_t batch, bool expect_chunks, int skewed_input = -1, bool skew_output = false) {
  using nodes = typename Step::nodes;
  constexpr std::size_t R = ctg::tl::index_of<Root, nodes>::value;
  using info = ctg::detail::group_info<Step, R>;
  static_assert(info::loop == ctg::loop_kind::flat || info::loop == ctg::loop_kind::rows);
  static_assert(info::nreductions == 0);
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
  std::vector<skewed_buffer> bufs;
  bufs.reserve(info::ninputs);
  std::mt19937 rng(static_cast<unsigned>(batch) + 11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  [&]<std::size_t... S>(std::index_sequence<S...>) {
    auto one = [&]<std::size_t Slot>(std::integral_constant<std::size_t, Slot>) {
      constexpr std::size_t node = info::info.input[Slot];
      using N = ctg::tl::at_t<node, nodes>;
      const ctg::rt_shape s = dims_of<N>(batch);
      layout.set_slot(Slot, s.rank, s.d);
      hb.shape[node] = s;
      if constexpr (N::kind != ctg::node_kind::random) {  // (dropout's mask: computed, not read)
        static_assert(N::kind == ctg::node_kind::leaf, "this test feeds leaves only");
        using E = typename N::dtype;
        const std::size_t n = static_cast<std::size_t>(s.numel());
        bufs.emplace_back(n * sizeof(E), static_cast<int>(Slot) == skewed_input ? sizeof(E) : 0);
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

  const std::size_t n = static_cast<std::size_t>(os.numel());
  std::vector<T> want(n);
  hb.shape[info::iteration_node] = it;
  hb.shape[R] = os;
  hb.buf[R] = reinterpret_cast<std::byte*>(want.data());
  ctg::cpu::workspace ws;
  ctg::cpu::run_group<Step, R>(hb, ws);

  skewed_buffer out_buf(n * sizeof(T), skew_output ? sizeof(T) : 0);
  T* out = reinterpret_cast<T*>(out_buf.data());
  const dim_t width = ctg::cuda::chunk_width<Plan>(ctx, layout, out);
  INFO("batch ", batch, ", chunks of ", width);
  CHECK((width > 1) == expect_chunks);
  if (width > 1) CHECK(width == ctg::cuda::chunk_elements<T>);
  for (dim_t w : {width, dim_t{1}})
    for (dim_t threads : {dim_t{3}, dim_t{4}, dim_t{32}, dim_t{256}})
      for (dim_t blocks : {dim_t{1}, dim_t{5}}) {
        INFO("width ", w, ", ", blocks, " blocks of ", threads, " threads");
        std::memset(out_buf.data(), 0xA5, n * sizeof(T));  // (no result of these bytes: checked below)
        for (dim_t b = 0; b < blocks; ++b)
          for (dim_t t = 0; t < threads; ++t)
            ctg::cuda::elementwise_thread<Plan>(ctx, layout, out, w, {b, t, blocks, threads});
        std::size_t differ = 0;
        for (std::size_t i = 0; i < n; ++i) differ += std::memcmp(&out[i], &want[i], sizeof(T)) != 0;
        CHECK(differ == 0);
      }
  // The sentinel is never a result: every element was written.
  T sentinel;
  std::memset(&sentinel, 0xA5, sizeof(T));
  for (std::size_t i = 0; i < n; ++i) REQUIRE(std::memcmp(&want[i], &sentinel, sizeof(T)) != 0);
}

using H64 = ctg::input<"h", ctg::bf16, ctg::dyn, 64>;
using G64 = ctg::input<"g", ctg::bf16, ctg::dyn, 64>;
using X64 = ctg::input<"x", ctg::f32, ctg::dyn, 64>;
using B64 = ctg::param<"b", ctg::f32, 64>;
using X37 = ctg::input<"x", ctg::f32, ctg::dyn, 37>;
using D16 = ctg::input<"d", ctg::f64, ctg::dyn, 16>;
using X3d = ctg::input<"x", ctg::f32, ctg::dyn, 4, 8>;
using C4 = ctg::input<"c", ctg::f32, ctg::dyn, 4, 1>;
using S8 = ctg::input<"s", ctg::f32, ctg::dyn, 8, 8>;
using Long = ctg::input<"l", ctg::bf16, ctg::dyn, 2056>;
using LongB = ctg::param<"lb", ctg::bf16, 2056>;
}  // namespace

TEST_CASE("an elementwise group, as the CUDA kernel's threads compute it, against the CPU's") {
  for (dim_t batch : {dim_t{0}, dim_t{1}, dim_t{7}, dim_t{300}}) {
    // bf16 out, bf16 in: chunks of 8, 16-byte loads.
    auto swiglu = ctg::silu(H64{}) * G64{};
    check_group(ctg::forward(swiglu), swiglu, batch, true);
    // f32 out of bf16 and a broadcast f32 row: chunks of 4, the bf16 input in 8-byte loads.
    auto widened = ctg::cast<ctg::f32>(H64{}) * B64{} + ctg::lit<0.5>;
    check_group(ctg::forward(widened), widened, batch, true);
    // bf16 out of f32: chunks of 8, the f32 input in two 16-byte loads.
    auto narrowed = ctg::cast<ctg::bf16>(ctg::tanh(X64{}) * X64{});
    check_group(ctg::forward(narrowed), narrowed, batch, true);
    // f64: chunks of 2.
    auto wide = ctg::exp(D16{}) * ctg::lit<0.25>;
    check_group(ctg::forward(wide), wide, batch, true);
    // A column broadcast along the row (read at the row's base) next to a moving one.
    auto column = X3d{} * C4{};
    check_group(ctg::forward(column), column, batch, true);
    // Index-aware: an element's place in its row.
    auto masked = ctg::exp(ctg::causal_mask(S8{}));
    check_group(ctg::forward(masked), masked, batch, true);
    // Dropout's mask at each element.
    auto dropped = ctg::dropout<"drop">(X64{}, ctg::lit<0.25>);
    check_group(ctg::forward(dropped), dropped, batch, true);
    // A row of 37: element by element.
    auto odd = ctg::square(X37{});
    check_group(ctg::forward(odd), odd, batch, false);
    // An input or the output off its alignment: element by element.
    check_group(ctg::forward(swiglu), swiglu, batch, false, 1);
    check_group(ctg::forward(widened), widened, batch, false, 0);
    check_group(ctg::forward(widened), widened, batch, false, -1, true);
  }
  // Rows longer than a block of chunks: tiles, the last of a row shorter.
  for (dim_t batch : {dim_t{1}, dim_t{3}}) {
    auto long_rows = ctg::gelu(Long{} + LongB{});
    check_group(ctg::forward(long_rows), long_rows, batch, true);
  }
}

// An elementwise group's CUDA kernel runs cuda::elementwise_thread in every
// thread (exec/cuda/elementwise_thread.hpp, host and device code). Here every
// thread of launches of several block sizes and grids runs on the CPU, in
// 16-byte chunks (lower/read_ahead.hpp) and element by element, against the
// CPU backend's own runner (cpu::run_group): the same bits, every element
// written. Where a row's length or a buffer's address rules chunks out,
// chunk_width says so.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include <ctg/exec/cuda/elementwise_thread.hpp>

#include "../common/group_fixture.hpp"

namespace {
using ctg::dim_t;

// Group Root of Step (reading leaves only) on `batch` rows of random values;
// input `skewed_input` (if any) and the output, when `skew_output`, start one
// element past an aligned address. Expects chunks where `expect_chunks`.
template <class Step, class Root>
void check_group(Step, Root, dim_t batch, bool expect_chunks, int skewed_input = -1, bool skew_output = false) {
  test_groups::fixture_of<Step, Root> g(batch, static_cast<unsigned>(batch) + 11, skewed_input);
  using F = decltype(g);
  static_assert(F::info::loop == ctg::loop_kind::flat || F::info::loop == ctg::loop_kind::rows);
  static_assert(F::info::nreductions == 0);
  using Plan = typename F::Plan;
  using T = typename F::T;
  const std::vector<T> want = g.run_cpu();
  const std::size_t n = want.size();

  test_groups::skewed_bytes out_buf(n * sizeof(T), skew_output ? sizeof(T) : 0);
  T* out = reinterpret_cast<T*>(out_buf.data());
  const dim_t width = ctg::cuda::chunk_width<Plan>(g.ctx, g.layout, out);
  INFO("batch ", batch, ", chunks of ", width);
  CHECK((width > 1) == expect_chunks);
  if (width > 1) CHECK(width == ctg::kernel::chunk_elements<T>);
  for (dim_t w : {width, dim_t{1}})
    for (dim_t threads : {dim_t{3}, dim_t{4}, dim_t{32}, dim_t{256}})
      for (dim_t blocks : {dim_t{1}, dim_t{5}}) {
        INFO("width ", w, ", ", blocks, " blocks of ", threads, " threads");
        std::memset(out_buf.data(), 0xA5, n * sizeof(T));  // (no result of these bytes: checked below)
        for (dim_t b = 0; b < blocks; ++b)
          for (dim_t t = 0; t < threads; ++t)
            ctg::cuda::elementwise_thread<Plan>(g.ctx, g.layout, out, w, {b, t, blocks, threads});
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

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
// input `skewed_input` (if any), the output when `skew_output` and its side
// output (a cast of it the group writes too) when `skew_side`, start one
// element past an aligned address. Expects chunks where `expect_chunks`.
template <class Step, class Root>
void check_group(Step, Root, dim_t batch, bool expect_chunks, int skewed_input = -1, bool skew_output = false,
                 bool skew_side = false) {
  test_groups::fixture_of<Step, Root> g(batch, static_cast<unsigned>(batch) + 11, skewed_input);
  using F = decltype(g);
  static_assert(F::info::loop == ctg::loop_kind::flat || F::info::loop == ctg::loop_kind::rows);
  static_assert(F::info::nreductions == 0);
  using Plan = typename F::Plan;
  using T = typename F::T;
  using S = typename F::S;
  const std::vector<T> want = g.run_cpu();
  const std::size_t n = want.size();

  test_groups::skewed_bytes out_buf(n * sizeof(T), skew_output ? sizeof(T) : 0);
  test_groups::skewed_bytes side_buf(n * sizeof(S), skew_side ? sizeof(S) : 0);
  typename Plan::outputs out;
  out.root = reinterpret_cast<T*>(out_buf.data());
  if constexpr (F::has_side) out.side = reinterpret_cast<S*>(side_buf.data());
  const dim_t width = ctg::cuda::chunk_width<Plan>(g.ctx, g.layout, out);
  INFO("batch ", batch, ", chunks of ", width);
  CHECK((width > 1) == expect_chunks);
  if (width > 1) CHECK(width == ctg::kernel::chunk_elements<T>);
  for (dim_t w : {width, dim_t{1}})
    for (dim_t threads : {dim_t{3}, dim_t{4}, dim_t{32}, dim_t{256}})
      for (dim_t blocks : {dim_t{1}, dim_t{5}}) {
        INFO("width ", w, ", ", blocks, " blocks of ", threads, " threads");
        std::memset(out_buf.data(), 0xA5, n * sizeof(T));  // (no result of these bytes: checked below)
        std::memset(side_buf.data(), 0xA5, n * sizeof(S));
        for (dim_t b = 0; b < blocks; ++b)
          for (dim_t t = 0; t < threads; ++t)
            ctg::cuda::elementwise_thread<Plan>(g.ctx, g.layout, out, w, {b, t, blocks, threads});
        std::size_t differ = 0;
        for (std::size_t i = 0; i < n; ++i) differ += std::memcmp(&out.root[i], &want[i], sizeof(T)) != 0;
        CHECK(differ == 0);
        if constexpr (F::has_side) {
          std::size_t side_differ = 0;
          for (std::size_t i = 0; i < n; ++i) side_differ += std::memcmp(&out.side[i], &g.cpu_side[i], sizeof(S)) != 0;
          CHECK(side_differ == 0);
        }
      }
  // The sentinel is never a result: every element was written.
  T sentinel;
  std::memset(&sentinel, 0xA5, sizeof(T));
  for (std::size_t i = 0; i < n; ++i) REQUIRE(std::memcmp(&want[i], &sentinel, sizeof(T)) != 0);
  if constexpr (F::has_side) {
    S side_sentinel;
    std::memset(&side_sentinel, 0xA5, sizeof(S));
    for (std::size_t i = 0; i < n; ++i) REQUIRE(std::memcmp(&g.cpu_side[i], &side_sentinel, sizeof(S)) != 0);
  }
}

// A forward step in which `value` and its cast to C are each read by another
// group (a sum over rows; a product), so the cast is the side output of
// value's group (lower/schedule.hpp).
template <class C, class E>
auto with_side_cast(E value) {
  using Wc = ctg::param<"wc", C, E::dims::dims[E::dims::rank - 1], 8>;
  auto cast = ctg::cast<C>(value);
  auto step = ctg::forward(ctg::sum(ctg::sum<0>(value)) + ctg::sum(ctg::cast<ctg::f32>(ctg::matmul(cast, Wc{}))));
  using S = decltype(step);
  constexpr std::size_t r = ctg::tl::index_of<E, typename S::nodes>::value;
  static_assert(ctg::schedule<S>::table.side[r] == ctg::tl::index_of<decltype(cast), typename S::nodes>::value);
  return step;
}

using H64 = ctg::input<"h", ctg::bf16, ctg::dyn, 64>;
using G64 = ctg::input<"g", ctg::bf16, ctg::dyn, 64>;
using X64 = ctg::input<"x", ctg::f32, ctg::dyn, 64>;
using B64 = ctg::param<"b", ctg::f32, 64>;
using X37 = ctg::input<"x", ctg::f32, ctg::dyn, 37>;
using B37 = ctg::param<"b", ctg::f32, 37>;
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
    auto dropped15 = ctg::dropout<"drop15">(X64{}, ctg::lit<0.15>) * X64{};
    check_group(ctg::forward(dropped15), dropped15, batch, true);
    auto droppedh = ctg::dropout<"droph">(ctg::tanh(H64{}), ctg::lit<0.15>);
    check_group(ctg::forward(droppedh), droppedh, batch, true);
    auto droppedd = ctg::dropout<"dropd">(D16{}, ctg::lit<0.15>);
    check_group(ctg::forward(droppedd), droppedd, batch, true);
    // Rows of 37: element by element where they are rows (a broadcast row
    // read in each); a flat loop's elements are one row (launched_layout),
    // in chunks where their count is a multiple of 4.
    auto odd_rows = ctg::square(X37{}) * B37{};
    check_group(ctg::forward(odd_rows), odd_rows, batch, false);
    auto odd = ctg::square(X37{});
    check_group(ctg::forward(odd), odd, batch, batch * 37 % 4 == 0);
    // An input or the output off its alignment: element by element.
    check_group(ctg::forward(swiglu), swiglu, batch, false, 1);
    check_group(ctg::forward(widened), widened, batch, false, 0);
    check_group(ctg::forward(widened), widened, batch, false, -1, true);
  }
  // A side output: f32 and its bf16 cast (chunks of 4: the cast in 8-byte
  // stores), bf16 and its f32 cast (chunks of 8: two 16-byte stores), and
  // the cast off its alignment (element by element).
  for (dim_t batch : {dim_t{0}, dim_t{3}, dim_t{300}}) {
    auto f32_value = ctg::tanh(X64{} * X64{});  // (not a product: that would be computed in each reader)
    check_group(with_side_cast<ctg::bf16>(f32_value), f32_value, batch, true);
    check_group(with_side_cast<ctg::bf16>(f32_value), f32_value, batch, false, -1, false, true);
    auto bf16_value = ctg::exp(H64{} * G64{});
    check_group(with_side_cast<ctg::f32>(bf16_value), bf16_value, batch, true);
  }
  // Rows longer than a block of chunks: tiles, the last of a row shorter.
  for (dim_t batch : {dim_t{1}, dim_t{3}}) {
    auto long_rows = ctg::gelu(Long{} + LongB{});
    check_group(ctg::forward(long_rows), long_rows, batch, true);
  }
}

// The pieces of the execution core, each on its own: buffer placement by
// liveness, the loop shape the lowering gives a fused group, and a CPU group
// runner called directly on hand-filled bindings (the way the CUDA device
// tests use it as their reference), checked against plain loops and against
// the same group run inside a store.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <vector>

#include <ctg/ctg.hpp>

#include "../common/rt_shapes.hpp"

namespace {

using X = ctg::input<"x", ctg::f32, ctg::dyn, 5>;
using B = ctg::param<"b", ctg::f32, 5>;

// The index of the node that roots the group producing E in Step.
template <class Step, class E>
constexpr std::size_t root_of = ctg::schedule<Step>::table.group[ctg::tl::index_of<E, typename Step::nodes>::value];

using test_shapes::dims;

template <class E>
constexpr ctg::loop_kind loop_of() {
  using Step = decltype(ctg::forward(E{}));
  return ctg::detail::group_info<Step, root_of<Step, E>>::loop;
}

}  // namespace

TEST_CASE("buffer placement: lives that do not overlap share bytes, overlapping ones do not") {
  using ctg::detail::buffer_life;
  // a [0,1], b [1,2] overlaps a at position 1; c [2,3] overlaps b only; d [4,4] overlaps nobody.
  const buffer_life lives[] = {{0, 1, 64}, {1, 2, 128}, {2, 3, 64}, {4, 4, 256}};
  std::size_t at[4]{};
  const std::size_t size = ctg::detail::place_lives(lives, 4, at);
  CHECK(at[0] == 0);
  CHECK(at[1] == 64);   // a is still alive at 1
  CHECK(at[2] == 0);    // a ended before 2: its bytes are reused
  CHECK(at[3] == 0);    // everything ended before 4
  CHECK(size == 256);
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) {
      const bool overlap_in_time = lives[i].begin <= lives[j].end && lives[j].begin <= lives[i].end;
      const bool overlap_in_bytes = at[i] < at[j] + lives[j].bytes && at[j] < at[i] + lives[i].bytes;
      CHECK_FALSE((overlap_in_time && overlap_in_bytes));
    }
}

TEST_CASE("the lowering decides each fused group's loop shape once") {
  static_assert(loop_of<decltype(ctg::exp(X{}) * X{})>() == ctg::loop_kind::flat);
  static_assert(loop_of<decltype(X{} + B{})>() == ctg::loop_kind::rows);  // b broadcasts along the rows
  static_assert(loop_of<decltype(ctg::softmax(X{}))>() == ctg::loop_kind::rows);  // inlined row reductions
  static_assert(loop_of<decltype(ctg::sum<-1>(ctg::square(X{})))>() == ctg::loop_kind::row_reduce);
  static_assert(loop_of<decltype(ctg::sum<0>(ctg::square(X{})))>() == ctg::loop_kind::axis_reduce);
  CHECK(true);
}

TEST_CASE("a CPU group runner runs one group from hand-filled bindings") {
  auto e = ctg::softmax(X{} + B{});
  using E = decltype(e);
  using Step = decltype(ctg::forward(e));
  using nodes = Step::nodes;
  constexpr std::size_t R = root_of<Step, E>;
  static_assert(R == ctg::tl::index_of<E, nodes>::value, "softmax(x + b) is one group");
  static_assert(ctg::detail::group_info<Step, R>::ninputs == 2);

  const ctg::dim_t rows = 3;
  std::vector<float> x(rows * 5), b(5), out(rows * 5, -1.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.3f * static_cast<float>(i % 7) - 1.0f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(i);

  ctg::bindings<nodes::size> bind;
  constexpr std::size_t ix = ctg::tl::index_of<X, nodes>::value, ib = ctg::tl::index_of<B, nodes>::value;
  bind.buf[ix] = reinterpret_cast<std::byte*>(x.data());
  bind.buf[ib] = reinterpret_cast<std::byte*>(b.data());
  bind.buf[R] = reinterpret_cast<std::byte*>(out.data());
  bind.shape[ix] = dims({rows, 5});
  bind.shape[ib] = dims({5});
  bind.shape[R] = dims({rows, 5});
  ctg::cpu::workspace ws;
  ctg::cpu::run_group<Step, R>(bind, ws);

  // Plain loops: softmax over each row of x + b (in double; f32 results agree within a few ulps).
  for (ctg::dim_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0.0;
    for (int j = 0; j < 5; ++j) m = std::max(m, double(x[r * 5 + j]) + b[j]);
    for (int j = 0; j < 5; ++j) s += std::exp(double(x[r * 5 + j]) + b[j] - m);
    for (int j = 0; j < 5; ++j) CHECK(out[r * 5 + j] == doctest::Approx(std::exp(double(x[r * 5 + j]) + b[j] - m) / s).epsilon(1e-6));
  }

  // The same group inside a store gives the same bits.
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, ctg::forward(e));
  std::memcpy(store.param<B>().data(), b.data(), b.size() * sizeof(float));
  ctg::forward(e)(store, ctg::feed<X>(x, rows));
  REQUIRE(store.value().size() == out.size());
  CHECK(std::memcmp(store.value().data(), out.data(), out.size() * sizeof(float)) == 0);
}

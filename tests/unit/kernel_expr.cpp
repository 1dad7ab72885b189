// kernel::body_t: a fusion group's loop body as a name-free type, the one
// both backends evaluate (the CPU store runs every group through it, so every
// other unit test exercises its values; here: its shape). The expected types
// are written out by hand from the expression and the schedule rules.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>

#include <ctg/ctg.hpp>

namespace {
namespace k = ctg::kernel;
namespace op = ctg::op;
using ctg::f32;

template <class Step, class Node>
constexpr std::size_t index_in = ctg::tl::index_of<Node, typename Step::nodes>::value;

// The same model twice, under different leaf names.
template <ctg::fixed_string XName, ctg::fixed_string BName>
struct model {
  using X = ctg::input<XName, f32, ctg::dyn, 8>;
  using Bias = ctg::param<BName, f32, 8>;
  static constexpr auto y() { return ctg::exp(X{} * ctg::lit<0.5> + Bias{}); }
  using step = decltype(ctg::forward(y()));
  using root = decltype(y());
};
using first = model<"x", "b">;
using second = model<"input", "layer.bias">;

// x: slot 0, advancing; the bias [8] stretched over rows: slot 1, advancing
// along the row (its stride between rows is 0, which the loop's base gives).
using expected_body = k::apply<
    op::exp, f32,
    k::apply<op::add, f32,
             k::apply<op::mul, f32, k::load<0, f32, true>, k::constant<f32, std::bit_cast<std::uint64_t>(0.5)>>,
             k::load<1, f32, true>>>;
}  // namespace

TEST_CASE("a group's body names ops, dtypes, slots and constants only") {
  using body = k::body_t<first::step, index_in<first::step, first::root>>;
  static_assert(std::is_same_v<body, expected_body>);
  static_assert(ctg::group_count_v<first::step> == 1);
  CHECK(ctg::group_count_v<first::step> == 1);
}

TEST_CASE("groups that compute the same thing share one body type, whatever the leaves are called") {
  using a = k::body_t<first::step, index_in<first::step, first::root>>;
  using b = k::body_t<second::step, index_in<second::step, second::root>>;
  static_assert(!std::is_same_v<first::step, second::step>);
  static_assert(std::is_same_v<a, b>);
  CHECK(std::is_same_v<a, b>);
}

TEST_CASE("softmax: one group, its row max and row sum inlined as reductions read through locals") {
  using X = ctg::input<"x", f32, ctg::dyn, 16>;
  using S = decltype(ctg::forward(ctg::softmax<1>(X{})));
  static_assert(ctg::group_count_v<S> == 1);
  constexpr std::size_t root = S::nodes::size - 1;
  using reds = k::reductions_t<S, root>;
  static_assert(reds::size == 2);
  using r0 = ctg::tl::at_t<0, reds>;
  using r1 = ctg::tl::at_t<1, reds>;
  // Slot 0: max over x. Slot 1: the sum of exp(x - max), reading slot 0.
  static_assert(std::is_same_v<typename r0::op, op::max_r> && r0::slot == 0);
  static_assert(std::is_same_v<typename r0::child, k::load<0, f32, true>>);
  static_assert(std::is_same_v<typename r1::op, op::sum_r> && r1::slot == 1);
  using shifted_exp = k::apply<op::exp, f32, k::apply<op::sub, f32, k::load<0, f32, true>, k::local<0, f32>>>;
  static_assert(std::is_same_v<typename r1::child, shifted_exp>);
  // The output divides the same exp by the row sum.
  static_assert(std::is_same_v<k::body_t<S, root>, k::apply<op::div, f32, shifted_exp, k::local<1, f32>>>);
  CHECK(reds::size == 2);
}

TEST_CASE("dropout's mask is computed in the body from its name's stream; each node rounds to its dtype") {
  using X = ctg::input<"x", ctg::bf16, ctg::dyn, 8>;
  auto y = ctg::dropout<"drop">(ctg::tanh(X{}), ctg::lit<0.25>);  // bf16(f32(tanh x) * mask)
  using S = decltype(ctg::forward(y));
  static_assert(ctg::group_count_v<S> == 1);
  using body = k::body_t<S, index_in<S, decltype(y)>>;
  // x is slot 0; the mask has no buffer, but its element index is taken like
  // a buffer's, in slot 1.
  using tanh_x = k::apply<op::tanh, ctg::bf16, k::load<0, ctg::bf16, true>>;
  using mask = k::dropout<ctg::name_hash("drop", 4), std::bit_cast<std::uint64_t>(0.25), 1, true, f32>;
  using expected = k::apply<op::cast<ctg::bf16>, ctg::bf16,
                            k::apply<op::mul, f32, k::apply<op::cast<f32>, f32, tanh_x>, mask>>;
  static_assert(std::is_same_v<body, expected>);
  CHECK(std::is_same_v<body, expected>);
}

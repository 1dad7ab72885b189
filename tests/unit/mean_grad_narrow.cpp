// The gradient of a mean divides in the compute type, then rounds once to the
// leaf's dtype (a regression test: 1/count used to be rounded to bf16 first).
#include <doctest/doctest.h>

#include <ctg/ctg.hpp>

TEST_CASE("bf16 mean gradient is g/n rounded once") {
  using W = ctg::param<"w", ctg::bf16, 3>;
  using G = ctg::frozen<"g", ctg::bf16>;  // the upstream gradient, swept over [1, 2)
  auto step = ctg::value_and_grad(ctg::cast<ctg::f32>(ctg::mean(W{}) * G{}), ctg::wrt<W>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  int wrong = 0;
  for (unsigned m = 0; m < 128; ++m) {
    const ctg::bf16 g = ctg::bf16::from_bits(static_cast<std::uint16_t>(0x3F80u | m));  // 1 + m/128
    store.param<G>()[0] = g;
    step(store);
    const ctg::bf16 want(static_cast<float>(static_cast<double>(ctg::to_float(g)) / 3.0));
    for (auto v : store.grad<W>()) wrong += v.bits != want.bits;
  }
  CHECK(wrong == 0);
}

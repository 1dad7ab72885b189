// An empty batch (a ctg::dyn dim of 0) after a normal step, as PyTorch defines
// it: a mean over nothing is NaN, a sum over nothing is 0, and the gradients
// of an empty batch are zeros. No buffer of an earlier step is read as a
// result (a stale loss and the previous step's gradients were returned, and
// AdamW applied them). With check_finite on, the NaN loss is rejected and
// nothing is written.
#include "error_message.hpp"
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

namespace {
using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn>;
using T = ctg::input<"targets", ctg::i32, ctg::dyn>;
using W = ctg::param<"w", ctg::f32, 8, 4>;
using B = ctg::param<"b", ctg::f32, 4>;
using E = ctg::param<"embed.weight", ctg::f32, 5, 8>;

const std::vector<float> x3(3 * 8, 0.5f), none_f;
const std::vector<ctg::i32> ids3{0, 3, 4}, t3{0, 1, 3}, none_i;

template <class L, class Store>
std::vector<float> grad_of(Store& s) {
  return {s.template grad<L>().begin(), s.template grad<L>().end()};
}
template <class L, class Store>
void fill(Store& s, float v) {
  for (auto& e : s.template param<L>()) e = v;
}
// After a step on a non-empty batch (whose gradient of L is not zero), the
// empty batch's gradient of L is zero in every element.
template <class L, class Store>
void check_zero_grad(Store& s, const std::vector<float>& before) {
  CHECK(before != std::vector<float>(before.size(), 0.0f));
  CHECK(grad_of<L>(s) == std::vector<float>(before.size(), 0.0f));
}

auto affine() { return ctg::matmul(X{}, W{}) + B{}; }
}  // namespace

TEST_CASE("empty batch, mean loss: NaN, zero gradients (matmul with K = 0, a bias summed over no rows)") {
  auto check = [](auto step) {
    ctg::cpu::device dev;
    auto s = ctg::make_store(dev, step);
    fill<W>(s, 0.1f);
    CHECK(std::isfinite(step(s, ctg::feed<X>(x3, 3))));
    const auto gw = grad_of<W>(s), gb = grad_of<B>(s);
    CHECK(std::isnan(step(s, ctg::feed<X>(none_f, 0))));
    CHECK(std::isnan(s.value()[0]));
    check_zero_grad<W>(s, gw);
    check_zero_grad<B>(s, gb);
  };
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(affine())), ctg::wrt<W, B>);
  check(step);
  check(ctg::unfused(step));
}

TEST_CASE("empty batch, sum loss: 0, zero gradients") {
  auto step = ctg::value_and_grad(ctg::sum(ctg::square(affine())), ctg::wrt<W, B>);
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  fill<W>(s, 0.1f);
  CHECK(step(s, ctg::feed<X>(x3, 3)) != 0.0f);
  const auto gw = grad_of<W>(s), gb = grad_of<B>(s);
  CHECK(step(s, ctg::feed<X>(none_f, 0)) == 0.0f);
  check_zero_grad<W>(s, gw);
  check_zero_grad<B>(s, gb);
}

TEST_CASE("empty batch, a mean over the batch axis: NaN") {
  auto step = ctg::value_and_grad(ctg::sum(ctg::mean<0>(ctg::matmul(X{}, W{}))), ctg::wrt<W>);
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  fill<W>(s, 0.1f);
  CHECK(std::isfinite(step(s, ctg::feed<X>(x3, 3))));
  const auto gw = grad_of<W>(s);
  CHECK(std::isnan(step(s, ctg::feed<X>(none_f, 0))));
  check_zero_grad<W>(s, gw);
}

TEST_CASE("empty batch, embedding and cross-entropy: NaN (0/0, as PyTorch), zero gradients (scatter-add of no rows)") {
  auto logits = ctg::matmul(ctg::nn::embedding<"embed", 5, 8, ctg::precision::full<ctg::f32>>(Ids{}), W{});
  auto step = ctg::value_and_grad(ctg::nn::cross_entropy(logits, T{}), ctg::wrt<E, W>);
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  ctg::nn::init_params(s, 3, 0.5);
  CHECK(std::isfinite(step(s, ctg::feed<Ids>(ids3, 3), ctg::feed<T>(t3, 3))));
  const auto ge = grad_of<E>(s), gw = grad_of<W>(s);
  CHECK(std::isnan(step(s, ctg::feed<Ids>(none_i, 0), ctg::feed<T>(none_i, 0))));
  check_zero_grad<E>(s, ge);
  check_zero_grad<W>(s, gw);
}

// Not empty, but every target ignored (a micro-batch that is all padding):
// PyTorch's loss is 0/0 (NaN) and its gradients are 0; ctg's were NaN, which
// poisoned an accumulated gradient.
TEST_CASE("every target ignored: NaN loss, zero gradients (as PyTorch)") {
  auto logits = ctg::matmul(ctg::nn::embedding<"embed", 5, 8, ctg::precision::full<ctg::f32>>(Ids{}), W{});
  auto step = ctg::value_and_grad(ctg::nn::cross_entropy(logits, T{}), ctg::wrt<E, W>);
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  ctg::nn::init_params(s, 3, 0.5);
  const std::vector<ctg::i32> one_ignored{0, -100, 3};
  const float l = step(s, ctg::feed<Ids>(ids3, 3), ctg::feed<T>(one_ignored, 3));
  CHECK(std::isfinite(l));
  const auto ge = grad_of<E>(s), gw = grad_of<W>(s);
  const std::vector<ctg::i32> all_ignored(3, -100);
  CHECK(std::isnan(step(s, ctg::feed<Ids>(ids3, 3), ctg::feed<T>(all_ignored, 3))));
  check_zero_grad<E>(s, ge);
  check_zero_grad<W>(s, gw);
}

TEST_CASE("empty batch with check_finite: the NaN loss is rejected and nothing is written") {
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(affine())), ctg::wrt<W, B>);
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  fill<W>(s, 0.1f);
  s.check_finite(true);
  const float l = step(s, ctg::feed<X>(x3, 3));
  const auto gw = grad_of<W>(s);
  const auto m = test_util::message_of([&] { step(s, ctg::feed<X>(none_f, 0)); });
  CHECK(m.find("the loss is not finite") != std::string::npos);
  CHECK(s.value()[0] == l);
  CHECK(grad_of<W>(s) == gw);
  CHECK(s.steps_run() == 1);
}

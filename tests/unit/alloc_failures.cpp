// Every allocation a call makes may fail: the call throws std::bad_alloc and
// changes nothing, and the same call again gives what a store that never
// failed gives. This binary replaces operator new: armed with n, the n-th
// allocation from then on throws; each case is swept over n = 1, 2, ...
// until the call makes fewer allocations. One thread (cpu::device{1}), so
// the allocations come in one order.
//   * a step's first run, and a run at a new, larger shape: buffer placement
//     (recorded before it was done, a failed placement made the next run
//     skip it: a segfault, or gradients of other offsets);
//   * an evaluation step's run at a new shape on a shared store;
//   * init_params (it wrote the leaves before the failing one).
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include <ctg/ctg.hpp>

#include "../common/stored_values.hpp"
#include "../common/tiny_transformer.hpp"
#include "same_state.hpp"

namespace {
long countdown = 0;  // > 0: armed; the allocation that takes it to 0 throws

void* allocate(std::size_t n, std::size_t align) {
  if (countdown > 0 && --countdown == 0) throw std::bad_alloc();
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                              : std::malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}
[[gnu::noinline]] void release(void* p) noexcept { std::free(p); }
}  // namespace

#include "replaced_operator_new.hpp"

namespace {
using config = test_util::tiny_transformer_config<2>;
using test_util::Ids, test_util::Pos, test_util::Tg;
using model = ctg::nn::transformer<config, ctg::precision::full<ctg::f32>>;
constexpr int T = 5;

struct batch {
  std::vector<ctg::i32> ids, tg, pos{0, 1, 2, 3, 4};
  int b;
  explicit batch(int rows) : ids(static_cast<std::size_t>(rows * T)), tg(ids.size()), b(rows) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<ctg::i32>((3 * i + 1) % 11);
      tg[i] = static_cast<ctg::i32>((i * i + 2) % 11);
    }
  }
};
template <class Step, class Store>
float train(Step& step, Store& s, const batch& x) {
  return step(s, ctg::feed<Ids>(x.ids, x.b, T), ctg::feed<Pos>(x.pos, T), ctg::feed<Tg>(x.tg, x.b, T));
}

// call(store, k) armed at n = 1, 2, ...: a failure changes nothing, and
// the call again equals `twin`'s. k counts a store's calls that did not
// fail, so each call can differ from the last (a larger shape, another
// seed: a call that repeats the last one would hide what a failure wrote);
// returns how many allocations failed in turn.
template <class Store, class Call, class Same>
int sweep(Store& store, Store& twin, Call call, Same same) {
  int failures = 0, k = 0;
  for (long n = 1;; ++n) {
    const auto before = test_util::all_values(store);
    const auto value_before = store.value_count();
    bool failed = false;
    countdown = n;
    try {
      call(store, k);
    } catch (const std::bad_alloc&) {
      failed = true;
    }
    countdown = 0;
    if (!failed) {  // (n past the call's allocations: it ran)
      call(twin, k);
      same(store, twin);
      break;
    }
    ++failures;
    INFO("allocation " << n << " failed");
    CHECK(test_util::all_values(store) == before);
    CHECK(store.value_count() == value_before);
    call(store, k);  // again, nothing failing
    call(twin, k);
    ++k;
    same(store, twin);
  }
  return failures;
}
}  // namespace

TEST_CASE("a step whose allocation fails changes nothing; the step again is a store's that never failed") {
  auto step = ctg::value_and_grad(model::loss(Ids{}, Pos{}, Tg{}));
  ctg::cpu::device dev{1};
  auto store = ctg::make_store(dev, step), twin = ctg::make_store(dev, step);
  for (auto* s : {&store, &twin}) ctg::nn::init_params(*s, 4, 0.3);
  auto same = [](auto& a, auto& b) { same_state::check_same_state(a, b); };
  // The store's first run places every buffer; each next one, of a larger
  // shape, places them again.
  CHECK(sweep(store, twin, [&](auto& s, int k) { train(step, s, batch(1 + k)); }, same) > 1);
  const batch small(2);
  CHECK(train(step, store, small) == train(step, twin, small));
}

TEST_CASE("an evaluation step on a shared store whose allocation fails changes nothing") {
  auto step = ctg::value_and_grad(model::loss(Ids{}, Pos{}, Tg{}));
  auto sample = ctg::forward(model::evaluation::logits(Ids{}, Pos{}));
  ctg::cpu::device dev{1};
  auto store = ctg::make_store(dev, step, sample), twin = ctg::make_store(dev, step, sample);
  for (auto* s : {&store, &twin}) ctg::nn::init_params(*s, 4, 0.3);
  auto logits = [&](auto& s, int rows) {
    const batch x(rows);
    sample(s, ctg::feed<Ids>(x.ids, x.b, T), ctg::feed<Pos>(x.pos, T));
  };
  auto same = [&](auto& a, auto& b) {
    REQUIRE(a.value_count(sample) == b.value_count(sample));
    CHECK(same_state::same_bits(a.value(sample), b.value(sample)));
  };
  logits(store, 1);
  logits(twin, 1);
  CHECK(sweep(store, twin, [&](auto& s, int k) { logits(s, 2 + k); }, same) > 1);
}

TEST_CASE("init_params whose allocation fails writes no leaf") {
  // (It made and wrote one leaf at a time: a failure left the leaves
  // before it re-initialised and the rest as they were.)
  auto step = ctg::value_and_grad(model::loss(Ids{}, Pos{}, Tg{}));
  ctg::cpu::device dev{1};
  auto store = ctg::make_store(dev, step), twin = ctg::make_store(dev, step);
  for (auto* s : {&store, &twin}) ctg::nn::init_params(*s, 4, 0.3);
  auto same = [](auto& a, auto& b) { same_state::check_same_leaves(a, b); };
  CHECK(sweep(store, twin, [&](auto& s, int k) { ctg::nn::init_params(s, 7 + static_cast<unsigned>(k), 0.3); }, same) > 1);
}

// Stores made in a shared library with hidden symbols and in the program are
// different stores to an optimizer: each store's number (exec/store.hpp,
// detail::store_identity) comes from a counter every copy of ctg starts at
// a place of its own. (Both counters started at 0: the first store of each
// had number 1, and an optimizer made for the program's store updated the
// library's without an error.)
#include <cstdio>
#include <string>
#include <vector>

#include <ctg/optim/optim.hpp>

#include "model.hpp"

using namespace shared_library_test;

int main() {
  ctg::cpu::device dev{1};
  auto step = make_step();
  auto mine = ctg::make_store(dev, step);
  ctg::optim::adamw opt(mine, {.lr = 0.1f});
  auto other = make_store_in_library(dev);
  for (float& w : other.param<W>()) w = 1.0f;
  std::vector<float> x(8, 1.0f);
  step(other, ctg::feed<X>(x, 2));
  std::printf("store numbers: the program's %llu, the library's %llu\n",
              static_cast<unsigned long long>(mine.identity()), static_cast<unsigned long long>(other.identity()));
  if (mine.identity() == other.identity()) {
    std::printf("FAILED: two stores have one number\n");
    return 1;
  }
  try {
    opt.step(other);
    std::printf("FAILED: an optimizer of another store updated the library's store (w[0] 1 -> %g)\n",
                other.param<W>()[0]);
    return 1;
  } catch (const ctg::error& e) {
    const std::string m = e.what();
    const bool named = m.find("ctg: adamw: this optimizer was made for another store") == 0;
    std::printf("%s: %s\n", named ? "refused" : "FAILED: refused with another message", e.what());
    return named && other.param<W>()[0] == 1.0f ? 0 : 1;
  }
}

// Compile-fail pair: one_hot over more than 2^24 classes. Its ids are
// compared with the columns in f32, which holds every integer below 2^24
// exactly: past it, id 2^24 + 1 took a 1 at column 2^24 too, silently (and
// cross_entropy summed both columns' log-probabilities). The corrected
// twin has 2^24 classes.
// expect-error: ctg: one_hot needs at least 2 classes
// expect-error-count: 1
#include <ctg/ctg.hpp>

using Ids = ctg::input<"ids", ctg::i32, ctg::dyn>;

int main() {
#ifndef CTG_CORRECTED
  auto hot = ctg::one_hot<(ctg::dim_t{1} << 24) + 4>(Ids{});
#else
  auto hot = ctg::one_hot<(ctg::dim_t{1} << 24)>(Ids{});
#endif
  auto step = ctg::forward(ctg::sum(hot));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

// Compile-fail pair: an ignored index of 2^24 or more in magnitude. Ids are
// compared with it in f32, so id 2^24 + 1 (which rounds to 2^24) counted as
// ignored by index_valid<2^24>, silently. The corrected twin ignores -100,
// PyTorch's default. (expect-error is a regular expression: 2.24 stands for 2^24.)
// expect-error: ctg: an ignored index must be less than 2.24 in magnitude
// expect-error-count: 1
#include <ctg/ctg.hpp>

using Ids = ctg::input<"ids", ctg::i32, ctg::dyn>;

int main() {
#ifndef CTG_CORRECTED
  auto valid = ctg::index_valid<(1 << 24)>(Ids{});
#else
  auto valid = ctg::index_valid<-100>(Ids{});
#endif
  auto step = ctg::forward(ctg::sum(valid));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

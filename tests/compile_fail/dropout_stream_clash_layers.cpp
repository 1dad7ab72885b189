// Compile-fail pair: two dropouts of a stacked block whose names hash to
// different streams, but a layer's stream is the hash plus 0x9E3779B9 times
// the layer, and these two hashes differ by exactly that (found by search):
// "layers.{i}.wqqnm" at layer 1 draws the mask of "layers.{i}.mhrdz" at
// layer 0, silently. The corrected twin renames one.
// expect-error: ctg: two dropouts' names hash to one random stream
// expect-note: A = [^ ]*"layers.[{]i[}].wqqnm"
// expect-note: B = [^ ]*"layers.[{]i[}].mhrdz"
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;

template <ctg::fixed_string Prefix>
struct block {
  template <ctg::expr H>
  constexpr auto operator()(H h) const {
    auto a = ctg::dropout<Prefix + ".wqqnm">(ctg::tanh(h), ctg::lit<0.1>);
#ifndef CTG_CORRECTED
    auto b = ctg::dropout<Prefix + ".mhrdz">(ctg::sigmoid(h), ctg::lit<0.1>);  // the mistake (by chance)
#else
    auto b = ctg::dropout<Prefix + ".mhrdz2">(ctg::sigmoid(h), ctg::lit<0.1>);
#endif
    return (a + b) * ctg::param<Prefix + ".w", ctg::f32, 16>{};
  }
};

int main() {
  auto y = ctg::nn::stack<2, block>(X{});
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}

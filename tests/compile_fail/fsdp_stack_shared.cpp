// dist::fsdp frees a stack's whole parameters and gathers each layer's
// slices inside the stack that reads them. Two stacks of one block share
// their parameters: the second read the freed copy (a crash at the first
// step). Refused where the data_parallel is made with dist::fsdp; the
// corrected twin runs the same model data-parallel without it.
// expect-error: ctg: dist::fsdp gathers a stack's parameters layer by layer inside that stack
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <ctg/dist/data_parallel.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
template <ctg::fixed_string Prefix>
struct block {
  template <class In>
  constexpr auto operator()(In x) const {
    return x + ctg::tanh(ctg::matmul(x, ctg::param<Prefix + ".w", ctg::f32, 8, 8>{}));
  }
};

int main() {
  auto twice = ctg::nn::stack<2, block>(ctg::nn::stack<2, block>(X{}) * ctg::lit<0.5>);  // (one block: shared weights)
  auto step = ctg::value_and_grad(ctg::sum(ctg::square(twice)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
#ifndef CTG_CORRECTED
  ctg::dist::data_parallel dp(store, ctg::dist::emulate{2}, ctg::dist::fsdp{});
#else
  ctg::dist::data_parallel dp(store, ctg::dist::emulate{2});
#endif
  (void)dp;
  return 0;
}

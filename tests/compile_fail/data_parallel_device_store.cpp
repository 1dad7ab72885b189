// Compile-fail pair: dist::data_parallel over a store whose memory the host
// cannot read (a GPU's: exec/cuda/store.cuh). data_parallel reduces and
// shards gradients and parameters through host memory, so it runs CPU
// stores only; over a CUDA store it is not built yet. (A CPU-backend twin
// with the GPU's memory rule stands in for the CUDA store, which needs
// nvcc.) The corrected twin runs a CPU store.
// expect-error: ctg: dist::data_parallel runs CPU stores only
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <ctg/dist/checkpoint.hpp>
#include <ctg/dist/sharded_adamw.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;

struct device_memory_backend : ctg::cpu::backend {
  static constexpr bool host_memory = false;
};

int main() {
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{}, W{}))), ctg::wrt<W>);
#ifdef CTG_CORRECTED
  using backend = ctg::cpu::backend;
#else
  using backend = device_memory_backend;
#endif
  ctg::basic_store<backend, ctg::step_key_t<decltype(step)>> store;
  ctg::dist::data_parallel dp(store, ctg::dist::emulate{2});
  dp.accumulate(2);
  ctg::dist::sharded_adamw opt(dp, {.lr = 1e-3f});
  opt.step();
  ctg::dist::save("data_parallel_device_store.ctg", dp, opt);
}

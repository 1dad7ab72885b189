// Compile-fail pair: a store whose memory the host cannot read (a GPU's:
// exec/cuda/store.cuh) has no param<L>() span; the host writes its values
// with store.upload, as the corrected twin does. (A CPU-backend twin with the
// GPU's memory rule stands in for the CUDA store, which needs nvcc.)
// expect-error: ctg: this store's memory is a GPU's, which the host cannot read or write
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;

struct device_memory_backend : ctg::cpu::backend {
  static constexpr bool host_memory = false;
};

int main() {
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{}, W{}))), ctg::wrt<W>);
  ctg::basic_store<device_memory_backend, ctg::step_key_t<decltype(step)>> store;
  std::vector<float> w(32, 0.5f);
#ifdef CTG_CORRECTED
  store.upload(W{}, std::span<const float>(w));
#else
  auto p = store.param<W>();
  std::copy(w.begin(), w.end(), p.begin());
#endif
}

// The tiny transformer written in a .cu file (bf16 autocast and FP8 with
// delayed scaling): nvcc's front end compiles its graph, autodiff, schedule
// and CPU store, and three AdamW steps run on the CPU (no GPU needed). This
// is what a CUDA store will instantiate again. The run is checked against
// the same step unfused (one loop and one buffer per node), bit for bit.
#include <cstdio>
#include <vector>

#include <ctg/ctg.hpp>

namespace {
struct cfg {
  static constexpr ctg::dim_t vocab = 64, max_seq = 32, dim = 32, heads = 2, head_dim = 16, hidden = 88;
  static constexpr std::size_t layers = 2;
};
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;
constexpr int B = 2, T = 16;

template <class Step>
std::vector<float> train(Step step) {
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  ctg::nn::init_params(store, 11);
  ctg::optim::adamw opt(store, {.lr = 1e-2f});
  std::vector<int> ids(B * T), tg(B * T), pos(T);
  for (int i = 0; i < T; ++i) pos[i] = i;
  std::vector<float> losses;
  for (int i = 0; i < B * T; ++i) {
    ids[i] = (7 * i + 3) % cfg::vocab;
    tg[i] = (5 * i + 1) % cfg::vocab;
  }
  for (int s = 0; s < 3; ++s) {  // (one batch, so that training lowers its loss)
    losses.push_back(step(store, ctg::feed(Ids{}, ids, B, T), ctg::feed(Pos{}, pos, T), ctg::feed(Tg{}, tg, B, T)));
    opt.step(store);
  }
  return losses;
}

template <class Policy>
bool check(const char* name) {
  using M = ctg::nn::transformer<cfg, Policy>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  const std::vector<float> fused = train(step), unfused = train(ctg::unfused(step));
  bool ok = fused == unfused && fused[2] < fused[0];
  for (std::size_t s = 0; s < fused.size(); ++s)
    std::printf("%s step %zu: loss %.9g (unfused %.9g)\n", name, s, fused[s], unfused[s]);
  if (!ok) std::printf("FAIL: %s: the fused and unfused runs differ, or the loss did not fall\n", name);
  return ok;
}
}  // namespace

int main() {
  const bool bf16 = check<ctg::precision::autocast<ctg::bf16>>("bf16");
  const bool fp8 = check<ctg::precision::fp8<ctg::precision::delayed<>>>("fp8");
  return bf16 && fp8 ? 0 : 1;
}

// The FP8 recipe trains as well as bf16: the same small transformer, the
// same initial parameters and batches, trained with AdamW under
// autocast<bf16> and under fp8<delayed<>> (TransformerEngine's defaults).
// Both must learn the task, and the FP8 run's loss must end within 5% of the
// bf16 run's.
#include <ctg/optim/optim.hpp>

#include "grad_check.hpp"

namespace {
using ctg::dyn;
using ctg::i32;
namespace pr = ctg::precision;

struct config {
  static constexpr ctg::dim_t vocab = 16, max_seq = 16, dim = 32, heads = 4, head_dim = 8, hidden = 64;
  static constexpr std::size_t layers = 2;
};
using Ids = ctg::input<"ids", i32, dyn, dyn>;
using Pos = ctg::input<"pos", i32, dyn>;
using Tg = ctg::input<"targets", i32, dyn, dyn>;

constexpr int batch = 8, T = 12, steps = 80, tail = 10;

// Sequences of a small deterministic "language" with noise: the next token is
// (3 * previous + 1) mod 16, except that one token in 8 is random. The
// best loss is about (1/8) * ln 16 plus the entropy of the noise.
struct batches {
  gc::rng r{99};
  std::vector<i32> ids, targets;
  void next() {
    ids.assign(batch * T, 0);
    targets.assign(batch * T, 0);
    for (int b = 0; b < batch; ++b) {
      i32 tok = static_cast<i32>(r.uniform(0, 16)) % 16;
      for (int t = 0; t <= T; ++t) {
        if (t < T) ids[b * T + t] = tok;
        if (t > 0) targets[b * T + t - 1] = tok;
        tok = r.uniform(0, 1) < 0.125 ? static_cast<i32>(r.uniform(0, 16)) % 16 : (3 * tok + 1) % 16;
      }
    }
  }
};

// The mean loss of the last `tail` steps, and of the first step.
template <class P>
std::pair<double, double> train() {
  using model = ctg::nn::transformer<config, P>;
  auto step = ctg::value_and_grad(model::loss(Ids{}, Pos{}, Tg{}));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  ctg::nn::init_params(st, 7, 0.1);
  ctg::optim::adamw_config oc;
  oc.lr = 0.01f;
  oc.max_grad_norm = 1.0f;
  ctg::optim::adamw opt(st, oc);
  std::vector<i32> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = t;
  batches data;
  double first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    data.next();
    const float loss = step(st, ctg::feed<Ids>(data.ids, batch, T), ctg::feed<Pos>(pos, T),
                            ctg::feed<Tg>(data.targets, batch, T));
    if (s == 0) first = loss;
    if (s >= steps - tail) last += loss / tail;
    opt.step(st);
  }
  return {first, last};
}
}  // namespace

TEST_CASE("fp8<delayed> training ends within 5% of the bf16 loss") {
  const auto [bf16_first, bf16_last] = train<pr::autocast<ctg::bf16>>();
  const auto [fp8_first, fp8_last] = train<pr::fp8<pr::delayed<>>>();
  MESSAGE("loss after " << steps << " steps (mean of the last " << tail << "): bf16 " << bf16_last << ", fp8 "
                        << fp8_last << " (first step: " << bf16_first << ", " << fp8_first << ")");
  // Both learned the task (ln 16 = 2.77 at the start) ...
  CHECK(bf16_last < 0.5 * bf16_first);
  CHECK(fp8_last < 0.5 * fp8_first);
  // ... and FP8 ends within 5% of bf16.
  CHECK(std::abs(fp8_last - bf16_last) <= 0.05 * bf16_last);
}

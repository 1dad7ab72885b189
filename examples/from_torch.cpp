// Continue training, in ctg, a transformer trained in PyTorch.
//   /usr/bin/python3 examples/from_torch.py model.safetensors    # a few PyTorch steps, then save
//   build/default/examples/from_torch model.safetensors [steps] [out.safetensors]
// The PyTorch model (examples/from_torch.py) is ctg::nn::transformer's twin
// written with nn.Linear / nn.Embedding; ctg::io::torch_transformer_map()
// maps its state_dict onto ctg's leaves. The first evaluation loss here equals
// the one PyTorch printed last. The optimizer starts fresh (the file holds the
// weights only). With an out path, the trained weights are saved back in
// PyTorch's names and layouts: Transformer().load_state_dict(load_file(out)).
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/io/safetensors.hpp>
#include <ctg/io/torch_transformer_map.hpp>
#include <ctg/optim/optim.hpp>

namespace {
struct config {  // keep in sync with Config in from_torch.py
  static constexpr ctg::dim_t vocab = 16, max_seq = 16, dim = 32, heads = 2, head_dim = 16, hidden = 64;
  static constexpr std::size_t layers = 2;
};
using M = ctg::nn::transformer<config, ctg::precision::full<ctg::f32>>;
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;
constexpr int T = config::max_seq;

// Sequences counting from each start by its stride, modulo the vocabulary; targets: the next token.
void counting_batch(const std::vector<int>& starts, const std::vector<int>& strides, std::vector<int>& ids,
                    std::vector<int>& targets) {
  ids.resize(starts.size() * T);
  targets.resize(starts.size() * T);
  for (std::size_t b = 0; b < starts.size(); ++b)
    for (int t = 0; t < T; ++t) {
      ids[b * T + t] = (starts[b] + strides[b] * t) % config::vocab;
      targets[b * T + t] = (starts[b] + strides[b] * (t + 1)) % config::vocab;
    }
}
}  // namespace

// Loads `in`, reports the eval loss, trains `steps` steps, reports it again
// and saves to `out` when given.
int train(const char* in, int steps, const char* out) {
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  ctg::io::load_safetensors(in, store, ctg::io::torch_transformer_map());

  std::vector<int> pos(T), ids, targets;
  for (int t = 0; t < T; ++t) pos[t] = t;
  auto run = [&] {
    const int b = static_cast<int>(ids.size()) / T;
    return step(store, ctg::feed<Ids>(ids, b, T), ctg::feed<Pos>(pos, T), ctg::feed<Tg>(targets, b, T));
  };
  auto eval = [&] {  // eval_batch() in from_torch.py
    std::vector<int> starts, strides;
    for (int b = 0; b < 8; ++b) starts.push_back(5 * b % config::vocab), strides.push_back(1 + b % 3);
    counting_batch(starts, strides, ids, targets);
    return run();
  };
  std::printf("ctg: eval loss after loading %.6f\n", eval());

  ctg::optim::adamw opt(store, {.lr = 3e-3f, .weight_decay = 0.1f});
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> start(0, config::vocab - 1), stride(1, 3);
  for (int s = 0; s < steps; ++s) {
    std::vector<int> starts(16), strides(16);
    for (int b = 0; b < 16; ++b) starts[b] = start(rng), strides[b] = stride(rng);
    counting_batch(starts, strides, ids, targets);
    const float l = run();
    opt.step(store);
    if (s % 25 == 0) std::printf("ctg step %4d  loss %.4f\n", s, l);
  }
  std::printf("ctg: eval loss after %d more steps %.6f\n", steps, eval());
  if (out) {
    ctg::io::save_safetensors(out, store, ctg::io::torch_transformer_map(), {{"format", "pt"}});
    std::printf("saved to %s\n", out);
  }
  return 0;
}

int main(int argc, char** argv) {
  long steps = 100;
  if (argc > 2) {  // a whole number in [0, 10^6], nothing after it ("abc" is not 0)
    char* end = nullptr;
    steps = std::strtol(argv[2], &end, 10);
    if (end == argv[2] || *end != '\0' || steps > 1000000) steps = -1;
  }
  if (argc < 2 || argc > 4 || steps < 0) {
    std::fprintf(stderr, "usage: from_torch model.safetensors [steps, 0 to 1000000] [out.safetensors]\n");
    return 2;
  }
  try {
    return train(argv[1], static_cast<int>(steps), argc > 3 ? argv[3] : nullptr);
  } catch (const ctg::error& e) {  // a file that does not load, or cannot be written
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

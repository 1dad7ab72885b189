// ctg's side of check_safetensors.py: files written by another implementation
// (Python) loaded into stores, and written back.
//   safetensors_tool dtypes IN OUT_TORCH OUT_CTG
//       IN: every dtype and layout (the leaves below, PyTorch names and layouts:
//       torch_map). Loads it, saves it again with the same map (OUT_TORCH) and
//       with none (OUT_CTG: ctg's names and layouts, for Python to compare).
//   safetensors_tool model WEIGHTS BATCH OUT separate|fused
//       WEIGHTS: the PyTorch twin of ctg::nn::transformer<tiny, full<f32>>
//       (examples/from_torch.py, this tiny config); BATCH: I32 tensors "ids"
//       [3, 8] and "targets" [3, 8]. Loads through torch_transformer_map(style),
//       prints "loss <value>", saves the store back with the same map (OUT).
// A ctg::error is printed on stderr with exit code 1.
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/io/safetensors.hpp>
#include <ctg/io/torch_transformer_map.hpp>

#include "../unit/leaf_store.hpp"

namespace {
namespace io = ctg::io;

// 2 layers of H = 2 heads, d = 3, Dh = 4.
using dtype_store = test_util::leaf_store<
    ctg::param<"a", ctg::f32, 2, 3>, ctg::param<"b.weight", ctg::bf16, 3, 5>, ctg::frozen<"c", ctg::f16, 4>,
    ctg::param<"d", ctg::f64, 2, 2>, ctg::frozen<"e4", ctg::e4m3, 6>, ctg::frozen<"e5", ctg::e5m2, 6>,
    ctg::param<"layers.{i}.wq", ctg::f32, 2, 2, 3, 4>, ctg::param<"layers.{i}.wk", ctg::f32, 2, 2, 3, 4>,
    ctg::param<"layers.{i}.wv", ctg::f32, 2, 2, 3, 4>, ctg::param<"layers.{i}.wo", ctg::f32, 2, 2, 4, 3>>;

io::tensor_map torch_map() {
  io::tensor_map m;
  m.add("b.weight", "b.weight", io::torch_linear).add("c", "renamed.c");
  const char* qkv[] = {"layers.{i}.wq", "layers.{i}.wk", "layers.{i}.wv"};
  for (int p = 0; p < 3; ++p) m.add(qkv[p], "layers.{i}.qkv.weight", io::fused(io::torch_heads_in, p, 3));
  return m.add("layers.{i}.wo", "layers.{i}.o.weight", io::torch_heads_out);
}

struct tiny {  // tests/oracle/model_dump.cpp's
  static constexpr ctg::dim_t vocab = 11, max_seq = 8, dim = 16, heads = 2, head_dim = 8, hidden = 24;
  static constexpr std::size_t layers = 2;
};
using Ids = ctg::input<"ids", ctg::i32, 3, 8>;
using Pos = ctg::input<"pos", ctg::i32, 8>;
using Tg = ctg::input<"targets", ctg::i32, 3, 8>;

std::vector<ctg::i32> i32_tensor(const io::safetensors_file& f, const char* name) {
  const io::safetensors_tensor* t = f.find(name);
  if (!t || t->dtype != io::st_dtype::I32 || t->shape.numel() != 24)
    throw ctg::error(f.where() + "expected an I32 tensor '" + name + "' of 24 elements");
  std::vector<ctg::i32> v(24);
  std::memcpy(v.data(), t->data.data(), t->data.size());  // (little-endian host)
  return v;
}

int model(const char* weights, const char* batch, const char* out, io::qkv style) {
  using M = ctg::nn::transformer<tiny, ctg::precision::full<ctg::f32>>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  io::load_safetensors(weights, store, io::torch_transformer_map(style));
  const auto b = io::safetensors_file::read(batch);
  const std::vector<ctg::i32> ids = i32_tensor(b, "ids"), targets = i32_tensor(b, "targets");
  const std::vector<ctg::i32> pos{0, 1, 2, 3, 4, 5, 6, 7};
  const float loss = step(store, ctg::feed<Ids>(ids), ctg::feed<Pos>(pos), ctg::feed<Tg>(targets));
  std::printf("loss %.9g\n", static_cast<double>(loss));
  io::save_safetensors(out, store, io::torch_transformer_map(style));
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "dtypes" && argc == 5) {
      dtype_store s;
      io::load_safetensors(argv[2], s, torch_map());
      io::save_safetensors(argv[3], s, torch_map(), io::safetensors_file::read(argv[2]).metadata());
      io::save_safetensors(argv[4], s);
      return 0;
    }
    if (mode == "model" && argc == 6) {
      const std::string style = argv[5];
      if (style == "separate" || style == "fused")
        return model(argv[2], argv[3], argv[4], style == "fused" ? io::qkv::fused : io::qkv::separate);
    }
  } catch (const ctg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: safetensors_tool dtypes IN OUT_TORCH OUT_CTG\n"
               "       safetensors_tool model WEIGHTS BATCH OUT separate|fused\n");
  return 2;
}

// safetensors in and out: save then load is bitwise (every dtype; ctg's own
// names and a PyTorch-style map with transposed, per-head, fused and per-layer
// tensors; a real CPU store), each layout puts every element where PyTorch has
// it, the transformer map writes PyTorch's state_dict names and shapes, and every
// kind of bad file or map is rejected with a ctg::error naming the tensor and
// nothing written. (A file written by another implementation, and the first loss
// against PyTorch's: tests/oracle/check_safetensors.py.)
#include "error_message.hpp"
#include "temp_files.hpp"
#include "leaf_store.hpp"
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/io/safetensors.hpp>
#include <ctg/optim/optim.hpp>
#include <ctg/io/torch_transformer_map.hpp>

namespace fs = std::filesystem;
namespace io = ctg::io;
using test_util::message_of;

namespace {
// Every dtype, a leaf per layout, stacked leaves (2 layers, H = 2, d = 3, Dh = 4) and an input.
using A = ctg::param<"a", ctg::f32, 2, 3>;
using B = ctg::param<"b.weight", ctg::bf16, 3, 5>;
using C = ctg::frozen<"c", ctg::f16, 4>;
using D = ctg::param<"d", ctg::f64, 2, 2>;
using E4 = ctg::frozen<"e4", ctg::e4m3, 6>;
using E5 = ctg::frozen<"e5", ctg::e5m2, 6>;
using Q = ctg::param<"layers.{i}.wq", ctg::f32, 2, 2, 3, 4>;
using K = ctg::param<"layers.{i}.wk", ctg::f32, 2, 2, 3, 4>;
using V = ctg::param<"layers.{i}.wv", ctg::f32, 2, 2, 3, 4>;
using O = ctg::param<"layers.{i}.wo", ctg::f32, 2, 2, 4, 3>;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 3>;
using store_t = test_util::leaf_store<A, B, C, D, E4, E5, Q, K, V, O, X>;

io::tensor_map torch_map() {
  io::tensor_map m;
  m.add("b.weight", "b.weight", io::torch_linear)
      .add("c", "renamed.c")
      .add("layers.{i}.wq", "layers.{i}.qkv.weight", io::fused(io::torch_heads_in, 0, 3))
      .add("layers.{i}.wk", "layers.{i}.qkv.weight", io::fused(io::torch_heads_in, 1, 3))
      .add("layers.{i}.wv", "layers.{i}.qkv.weight", io::fused(io::torch_heads_in, 2, 3))
      .add("layers.{i}.wo", "layers.{i}.o.weight", io::torch_heads_out);
  return m;
}

// Pseudo-random bytes in every leaf: every bit pattern may occur (NaNs too), so compare bytes.
template <class S>
void fill(S& s, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::apply([&](auto&... v) { ((void)std::generate(reinterpret_cast<unsigned char*>(v.data()),
                                                    reinterpret_cast<unsigned char*>(v.data() + v.size()),
                                                    [&] { return static_cast<unsigned char>(gen()); }),
                                ...); },
             s.values);
}

struct temp_dir : test_util::temp_dir {
  temp_dir() : test_util::temp_dir("ctg_safetensors_test_") {}
};
using test_util::read_all;
void write_all(const fs::path& p, const std::vector<unsigned char>& bytes) {
  std::FILE* f = std::fopen(p.string().c_str(), "wb");
  REQUIRE(f);
  REQUIRE((bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size()));
  std::fclose(f);
}
// A file from a header's JSON text and `data` bytes of payload (values 1, 2, 3, ...).
std::vector<unsigned char> raw_file(const std::string& json, std::size_t data) {
  std::vector<unsigned char> out(8 + json.size() + data);
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(std::uint64_t(json.size()) >> (8 * i));
  for (std::size_t i = 0; i < json.size(); ++i) out[8 + i] = static_cast<unsigned char>(json[i]);
  for (std::size_t i = 0; i < data; ++i) out[8 + json.size() + i] = static_cast<unsigned char>(i + 1);
  return out;
}

template <class T>
std::uint64_t bits_of(const std::byte* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <class T>
std::uint64_t bits_of(const T& v) {
  return bits_of<T>(reinterpret_cast<const std::byte*>(&v));
}
}  // namespace

TEST_CASE("save then load is bitwise, for every dtype, with ctg's names and with a PyTorch-style map") {
  temp_dir dir;
  for (const io::tensor_map& map : {io::tensor_map{}, torch_map()}) {
    store_t s1, s2;
    fill(s1, 1);
    fill(s2, 2);
    REQUIRE(s1.bytes() != s2.bytes());
    io::save_safetensors(dir / "a.safetensors", s1, map, {{"format", "pt"}});
    io::load_safetensors(dir / "a.safetensors", s2, map);
    CHECK(s2.bytes() == s1.bytes());
    io::save_safetensors(dir / "b.safetensors", s2, map, {{"format", "pt"}});
    CHECK(read_all(dir / "a.safetensors") == read_all(dir / "b.safetensors"));
    CHECK(dir.names() == std::set<std::string>{"a.safetensors", "b.safetensors"});  // (no temporary file left)
  }
  // Without a map: ctg's names and dims, a stacked leaf whole.
  store_t s;
  io::save_safetensors(dir / "c.safetensors", s);
  const auto f = io::safetensors_file::read(dir / "c.safetensors");
  std::vector<std::string> names;
  for (const auto& t : f.tensors()) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"a", "b.weight", "c", "d", "e4", "e5", "layers.{i}.wq", "layers.{i}.wk",
                                          "layers.{i}.wv", "layers.{i}.wo"});
  CHECK(ctg::detail::dims_text(f.find("layers.{i}.wo")->shape) == "[2, 2, 4, 3]");
  CHECK(f.metadata().empty());
}

TEST_CASE("the layouts put every element where PyTorch has it") {
  temp_dir dir;
  store_t s;
  fill(s, 3);
  io::save_safetensors(dir / "t.safetensors", s, torch_map(), {{"format", "pt"}, {"k\"ey\\", "v\n\x01\xc3\xbc"}});
  const auto f = io::safetensors_file::read(dir / "t.safetensors");
  CHECK(f.metadata() == io::safetensors_metadata{{"format", "pt"}, {"k\"ey\\", "v\n\x01\xc3\xbc"}});

  std::map<std::string, std::string> kinds;
  for (const auto& t : f.tensors()) kinds[t.name] = std::string(io::name_of(t.dtype)) + " " + ctg::detail::dims_text(t.shape);
  CHECK(kinds == std::map<std::string, std::string>{{"a", "F32 [2, 3]"},
                                                    {"b.weight", "BF16 [5, 3]"},
                                                    {"renamed.c", "F16 [4]"},
                                                    {"d", "F64 [2, 2]"},
                                                    {"e4", "F8_E4M3 [6]"},
                                                    {"e5", "F8_E5M2 [6]"},
                                                    {"layers.0.qkv.weight", "F32 [24, 3]"},
                                                    {"layers.1.qkv.weight", "F32 [24, 3]"},
                                                    {"layers.0.o.weight", "F32 [3, 8]"},
                                                    {"layers.1.o.weight", "F32 [3, 8]"}});

  // nn.Linear: file (o, i) = ctg (i, o).
  const auto* b = f.find("b.weight")->data.data();
  const auto bw = s.param<B>();
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 5; ++o) CHECK(bits_of<ctg::bf16>(b + 2 * (o * 3 + i)) == bits_of(bw[std::size_t(i * 5 + o)]));
  // Fused q, k, v per head: file row part*H*Dh + h*Dh + j, column i = ctg [layer][h][i][j].
  const std::span<float> qkv[] = {s.param<Q>(), s.param<K>(), s.param<V>()};
  for (int layer = 0; layer < 2; ++layer) {
    const std::string n = "layers." + std::to_string(layer);
    const auto* w = f.find(n + ".qkv.weight")->data.data();
    const auto* wo = f.find(n + ".o.weight")->data.data();
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j) {
          for (int part = 0; part < 3; ++part)
            CHECK(bits_of<float>(w + 4 * ((part * 8 + h * 4 + j) * 3 + i)) ==
                  bits_of(qkv[part][std::size_t(((layer * 2 + h) * 3 + i) * 4 + j)]));
          // Output projection: file (i, h*Dh + j) = ctg [layer][h][j][i].
          CHECK(bits_of<float>(wo + 4 * (i * 8 + h * 4 + j)) ==
                bits_of(s.param<O>()[std::size_t(((layer * 2 + h) * 4 + j) * 3 + i)]));
        }
  }
}

TEST_CASE("a real CPU store: save, change, load gives the same bits and the same loss") {
  using W = ctg::param<"w", ctg::f32, 3, 4>;
  using Bb = ctg::param<"b", ctg::bf16, 4>;
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{}, W{}) + ctg::cast<ctg::f32>(Bb{}))));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  ctg::nn::init_params(st, 7, 0.5);
  const std::vector<float> x{0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};
  auto run = [&] { return step(st, ctg::feed<X>(std::span<const float>(x), 2)); };
  const float before = run();
  const std::vector<float> w(st.param<W>().begin(), st.param<W>().end());
  temp_dir dir;
  io::save_safetensors(dir / "m.safetensors", st, io::tensor_map{}.add("w", "w", io::torch_linear));
  ctg::nn::init_params(st, 8, 0.5);
  REQUIRE(run() != before);
  io::load_safetensors(dir / "m.safetensors", st, io::tensor_map{}.add("w", "w", io::torch_linear));
  CHECK(std::vector<float>(st.param<W>().begin(), st.param<W>().end()) == w);
  CHECK(run() == before);
}

TEST_CASE("a load replaces the values the store's gradients were taken at: no update applies them, and no set is cut") {
  // (load_safetensors kept them: the next opt.step applied the gradient of
  // the old weights to the loaded ones, w 1 -> 0.9; and a load between a
  // set's micro-batches mixed two models' gradients in one set.)
  using W = ctg::param<"w", float, 3>;
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(X{} * W{})));
  ctg::cpu::device dev;
  const std::vector<float> x{1, 2, 3, 4, 5, 6};
  auto feed = [&] { return ctg::feed<X>(std::span<const float>(x), 2); };
  temp_dir dir;
  {
    auto ones = ctg::make_store(dev, step);
    for (float& v : ones.param<W>()) v = 1.0f;
    io::save_safetensors(dir / "ones.safetensors", ones);
  }
  auto st = ctg::make_store(dev, step);
  for (float& v : st.param<W>()) v = 10.0f;
  ctg::optim::adamw opt(st, {.lr = 0.1f, .weight_decay = 0.0f});
  step(st, feed());  // (gradients at w = 10)
  io::load_safetensors(dir / "ones.safetensors", st);
  CHECK_THROWS_WITH_AS(opt.step(st), doctest::Contains("ctg: adamw: no gradients since the last update"), ctg::error);
  CHECK(std::vector<float>(st.param<W>().begin(), st.param<W>().end()) == std::vector<float>(3, 1.0f));
  // In the middle of a set: refused, the store untouched; between sets: loaded.
  for (float& v : st.param<W>()) v = 10.0f;
  st.accumulate(2);
  step(st, feed());
  const std::string message = message_of([&] { io::load_safetensors(dir / "ones.safetensors", st); });
  CHECK(message == "ctg: safetensors file '" + (dir / "ones.safetensors").string() +
                       "': the store is in the middle of a set of micro-batches (1 of 2), whose gradients and FP8 "
                       "amaxes a file does not keep: save or load between sets");
  CHECK(std::vector<float>(st.param<W>().begin(), st.param<W>().end()) == std::vector<float>(3, 10.0f));
  step(st, feed());
  io::load_safetensors(dir / "ones.safetensors", st);
  CHECK(st.param<W>()[0] == 1.0f);
}

TEST_CASE("the transformer map writes the PyTorch twin's state_dict names and shapes") {
  // ctg::nn::transformer's stored leaves for vocab 11, max_seq 8, dim 16, 2 heads of 8, hidden 24, 2 layers.
  using store = test_util::leaf_store<
      ctg::param<"tok.weight", ctg::f32, 11, 16>, ctg::param<"pos.weight", ctg::f32, 8, 16>,
      ctg::param<"layers.{i}.ln1.scale", ctg::f32, 2, 16>, ctg::param<"layers.{i}.attn.wq", ctg::f32, 2, 16, 16>,
      ctg::param<"layers.{i}.attn.wk", ctg::f32, 2, 16, 16>, ctg::param<"layers.{i}.attn.wv", ctg::f32, 2, 16, 16>,
      ctg::param<"layers.{i}.attn.wo", ctg::f32, 2, 16, 16>, ctg::param<"layers.{i}.ln2.scale", ctg::f32, 2, 16>,
      ctg::param<"layers.{i}.mlp.w1", ctg::f32, 2, 16, 24>, ctg::param<"layers.{i}.mlp.w3", ctg::f32, 2, 16, 24>,
      ctg::param<"layers.{i}.mlp.w2", ctg::f32, 2, 24, 16>, ctg::param<"ln_f.scale", ctg::f32, 16>,
      ctg::param<"lm_head.weight", ctg::f32, 16, 11>>;
  temp_dir dir;
  for (const io::qkv style : {io::qkv::separate, io::qkv::fused}) {
    store s;
    io::save_safetensors(dir / "t.safetensors", s, io::torch_transformer_map(style));
    std::map<std::string, std::string> got, want{{"tok.weight", "[11, 16]"}, {"pos.weight", "[8, 16]"},
                                                 {"ln_f.weight", "[16]"},     {"lm_head.weight", "[11, 16]"}};
    const auto file = io::safetensors_file::read(dir / "t.safetensors");
    for (const auto& t : file.tensors())
      got[t.name] = ctg::detail::dims_text(t.shape);
    for (const char* k : {"layers.0.", "layers.1."}) {
      const std::string p = k;
      want[p + "ln1.weight"] = want[p + "ln2.weight"] = "[16]";
      if (style == io::qkv::fused) want[p + "attn.wqkv.weight"] = "[48, 16]";
      else want[p + "attn.wq.weight"] = want[p + "attn.wk.weight"] = want[p + "attn.wv.weight"] = "[16, 16]";
      want[p + "attn.wo.weight"] = "[16, 16]";
      want[p + "mlp.w1.weight"] = want[p + "mlp.w3.weight"] = "[24, 16]";
      want[p + "mlp.w2.weight"] = "[16, 24]";
    }
    CHECK(got == want);
  }
}

namespace {
using P = ctg::param<"p", ctg::f32, 2>;
using Qb = ctg::param<"q", ctg::bf16, 3>;
using small_t = test_util::leaf_store<P, Qb>;
const std::string p_ok = R"("p":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string q_ok = R"("q":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]})";
const std::string valid = "{" + p_ok + "," + q_ok + "}";

// Loading `file` throws a ctg::error containing every phrase, and changes nothing.
void rejected(const fs::path& path, const std::vector<unsigned char>& file, std::vector<std::string> phrases,
              const io::tensor_map& map = {}) {
  write_all(path, file);
  small_t s;
  fill(s, 9);
  const auto before = s.bytes();
  const std::string msg = message_of([&] { io::load_safetensors(path, s, map); });
  INFO(msg);
  CHECK(msg.starts_with("ctg: "));
  for (const auto& p : phrases) CHECK(msg.find(p) != std::string::npos);
  CHECK(s.bytes() == before);
}
}  // namespace

TEST_CASE("every kind of bad file is rejected, naming the tensor, with nothing written") {
  temp_dir dir;
  const fs::path path = dir / "bad.safetensors";
  const std::string where = "ctg: safetensors file '" + path.string() + "': ";
  {  // the base case loads
    write_all(path, raw_file(valid, 14));
    small_t s;
    io::load_safetensors(path, s);
    CHECK(bits_of(s.param<P>()[0]) == 0x04030201u);
  }
  struct bad {
    const char* what;
    std::string json;
    std::size_t data;
    std::vector<std::string> phrases;
  };
  const std::string meta = R"("__metadata__":{"format":"pt"},)";
  const bad cases[] = {
      {"not an object", "[" + p_ok + "]", 8, {where + "malformed header at byte 0: expected '{'"}},
      {"trailing text", valid + "x", 14, {"malformed header", "expected only spaces"}},
      {"unterminated", valid.substr(0, valid.size() - 1), 14, {"malformed header", "expected '}'"}},
      {"a missing comma", "{" + p_ok + q_ok + "}", 14, {"malformed header", "expected '}'"}},
      {"a duplicate tensor", "{" + p_ok + "," + p_ok + "," + q_ok + "}", 14, {"tensor 'p' occurs twice"}},
      {"an unknown field", R"({"p":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1},)" + q_ok + "}", 14,
       {"tensor 'p'", "found 'x'"}},
      {"a missing field", R"({"p":{"dtype":"F32","shape":[2]},)" + q_ok + "}", 14,
       {"tensor 'p'", "expected the field 'data_offsets', found none"}},
      {"a field twice", R"({"p":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]},)" + q_ok + "}", 14,
       {"tensor 'p'", "field 'dtype' occurs twice"}},
      {"an unknown dtype", R"({"p":{"dtype":"F33","shape":[2],"data_offsets":[0,8]},)" + q_ok + "}", 14,
       {"tensor 'p'", "found 'F33'"}},
      {"a dtype that is not a string", R"({"p":{"dtype":4,"shape":[2],"data_offsets":[0,8]},)" + q_ok + "}", 14,
       {"malformed header", "expected '\"'"}},
      {"a negative dim", R"({"p":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]},)" + q_ok + "}", 14,
       {"malformed header", "a non-negative integer"}},
      {"a fractional dim", R"({"p":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]},)" + q_ok + "}", 14,
       {"malformed header", "expected an integer"}},
      {"a leading zero", R"({"p":{"dtype":"F32","shape":[02],"data_offsets":[0,8]},)" + q_ok + "}", 14,
       {"malformed header", "no leading zero"}},
      {"an integer past 2^64", R"({"p":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]},)" + q_ok + "}",
       14, {"malformed header", "below 2^64"}},
      {"rank 7", R"({"p":{"dtype":"F32","shape":[1,1,1,1,1,1,2],"data_offsets":[0,8]},)" + q_ok + "}", 14,
       {"tensor 'p'", "at most 6 dims"}},
      {"three offsets", R"({"p":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]},)" + q_ok + "}", 14,
       {"malformed header", "two entries"}},
      {"one offset", R"({"p":{"dtype":"F32","shape":[2],"data_offsets":[8]},)" + q_ok + "}", 14,
       {"tensor 'p'", "expected data_offsets [begin, end], found 1 entries"}},
      {"offsets backwards", R"({"p":{"dtype":"F32","shape":[2],"data_offsets":[8,0]},)" + q_ok + "}", 14,
       {"tensor 'p'", "end before they begin"}},
      {"a byte count not the shape's", std::string(R"({"p":{"dtype":"F32","shape":[2],"data_offsets":[0,7]},)") +
                                           R"("q":{"dtype":"BF16","shape":[3],"data_offsets":[7,13]}})",
       13, {"tensor 'p' (F32 [2]): expected 8 data bytes, found data_offsets [0, 7)"}},
      {"dims holding more than 2^63 elements", R"({"p":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]},)" + q_ok + "}", 14,
       {where + "tensor 'p' (F32 [4611686018427387904, 4]): its dims hold more than 2^63 elements"}},
      {"dims a 0 hides an overflow of", R"({"p":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]},)" + q_ok + "}", 14,
       {where + "tensor 'p' (F32 [0, 4294967296, 4294967296]): its dims hold more than 2^63 elements"}},
      {"data of more than 2^64 bytes", R"({"p":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]},)" + q_ok + "}", 14,
       {where + "tensor 'p' (F64 [4611686018427387904]): its data would take more than 2^64 bytes"}},
      {"overlapping offsets", "{" + p_ok + R"(,"q":{"dtype":"BF16","shape":[3],"data_offsets":[6,12]}})", 12,
       {"tensor 'q' data_offsets [6, 12) overlap tensor 'p'"}},
      {"a gap", "{" + p_ok + R"(,"q":{"dtype":"BF16","shape":[3],"data_offsets":[10,16]}})", 16,
       {"tensor 'q' data_offsets [10, 16): expected to begin at 8"}},
      {"offsets past the data (truncated)", valid, 12, {"truncated or out of range: tensor 'q' (BF16 [3])", "<= 12"}},
      {"bytes after the last tensor", valid, 20, {"expected 14 data bytes (the tensors' offsets), found 20"}},
      {"metadata that is not a string", R"({"__metadata__":{"format":1},)" + p_ok + "," + q_ok + "}", 14,
       {"malformed header", "expected '\"'"}},
      {"metadata twice", "{" + meta + meta + p_ok + "," + q_ok + "}", 14, {"\"__metadata__\" occurs twice"}},
      {"a metadata key twice", R"({"__metadata__":{"a":"1","a":"2"},)" + p_ok + "," + q_ok + "}", 14,
       {"malformed header: metadata key 'a' occurs twice"}},
      {"a bad escape", R"({"p\x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)" + q_ok + "}", 14,
       {"malformed header", "expected an escape"}},
      {"a control character", "{\"p\t\"" + p_ok.substr(3) + "," + q_ok + "}", 14,
       {"malformed header", "no control character"}},
      {"a lone low surrogate", R"({"p\udc00":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)" + q_ok + "}", 14,
       {"malformed header", "a high surrogate before a low one"}},
      {"a wrong dtype", "{" + p_ok + R"(,"q":{"dtype":"F16","shape":[3],"data_offsets":[8,14]}})", 14,
       {where + "tensor 'q' for leaf 'q': expected dtype BF16, found F16"}},
      {"a wrong shape", "{" + p_ok + R"(,"q":{"dtype":"BF16","shape":[1,3],"data_offsets":[8,14]}})", 14,
       {where + "tensor 'q' for leaf 'q': expected shape [3], found [1, 3]"}},
      {"a missing tensor", "{" + meta + p_ok + "}", 8,
       {where + "tensor 'q' for leaf 'q': expected BF16 [3], found no such tensor"}},
      {"an unexpected tensor", "{" + p_ok + "," + q_ok + R"(,"r":{"dtype":"I32","shape":[1],"data_offsets":[14,18]}})",
       18, {where + "tensor 'r' (I32 [1]) is in the file but no leaf of this model maps to it"}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    rejected(path, raw_file(c.json, c.data), c.phrases);
  }

  const std::vector<unsigned char> good = raw_file(valid, 14);
  SUBCASE("a header length past the end of the file") {
    auto f = good;
    f[0] = 0xff;
    rejected(path, f, {where + "truncated: the header length says 255 bytes, found " + std::to_string(valid.size() + 14)});
  }
  SUBCASE("every truncation") {
    for (std::size_t n = 0; n < good.size(); ++n) {
      INFO("first " << n << " bytes");
      rejected(path, std::vector<unsigned char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)), {where});
    }
  }
  SUBCASE("every byte of the length and the header flipped") {
    for (std::size_t i = 0; i < 8 + valid.size(); ++i) {
      INFO("byte " << i);
      auto f = good;
      f[i] ^= 0xff;
      rejected(path, f, {where});
    }
  }
  SUBCASE("a leaf the file has under another layout") {
    rejected(path, good, {where + "tensor 'q' for leaf 'q': expected shape [6], found [3] (layout as_is, part 0 of 2)"},
             io::tensor_map{}.add("q", "q", io::fused(io::as_is, 0, 2)));
  }
  SUBCASE("no file") {
    CHECK(message_of([&] {
            small_t s;
            io::load_safetensors(dir / "none.safetensors", s);
          }).starts_with("ctg: cannot open safetensors file '"));
  }
}

TEST_CASE("a map that does not fit the model is rejected before any file is touched") {
  temp_dir dir;
  small_t s;
  CHECK(message_of([&] { io::save_safetensors(dir / "x.safetensors", s, io::tensor_map{}.add("nope", "n")); }) ==
        "ctg: tensor_map: leaf 'nope' (mapped to tensor 'n') is not a stored leaf of this model");
  CHECK(message_of([&] { io::save_safetensors(dir / "x.safetensors", s, io::tensor_map{}.add("p", "p", io::torch_linear)); }) ==
        "ctg: tensor_map: leaf 'p': layout torch_linear does not fit its rank 1 (expected 2)");
  CHECK(message_of([&] {
          io::save_safetensors(dir / "x.safetensors", s, io::tensor_map{}.add("p", "p", io::fused(io::as_is, 1, 2)));
        }) == "ctg: tensor_map: tensor 'p': expected all 2 parts mapped, found none for part 0");
  CHECK(message_of([&] {
          io::save_safetensors(dir / "x.safetensors", s,
                               io::tensor_map{}.add("p", "t", io::fused(io::as_is, 0, 2)).add("q", "t", io::fused(io::as_is, 1, 2)));
        }) == "ctg: tensor_map: tensor 't' gets F32 [4] in 2 part(s) from leaf 'p' but BF16 [6] in 2 part(s) from leaf 'q'");
  CHECK(message_of([&] { io::tensor_map{}.add("p", "p").add("p", "q"); }) == "ctg: tensor_map: leaf 'p' is mapped twice");
  CHECK(message_of([&] { io::tensor_map{}.add("p", "p", io::fused(io::as_is, 3, 3)); }) ==
        "ctg: tensor_map: leaf 'p': expected a part in [0, 3), found 3");
  CHECK(fs::is_empty(dir.path));
}

// (w1 and w3 swapped on save and on load alike passed every round trip.)
TEST_CASE("torch_transformer_map: each PyTorch tensor holds its own leaf's values (w1, w2, w3, wq, wk, wv, wo)") {
  using Wq = ctg::param<"layers.{i}.attn.wq", ctg::f32, 2, 16, 16>;
  using Wk = ctg::param<"layers.{i}.attn.wk", ctg::f32, 2, 16, 16>;
  using Wv = ctg::param<"layers.{i}.attn.wv", ctg::f32, 2, 16, 16>;
  using Wo = ctg::param<"layers.{i}.attn.wo", ctg::f32, 2, 16, 16>;
  using W1 = ctg::param<"layers.{i}.mlp.w1", ctg::f32, 2, 16, 24>;
  using W3 = ctg::param<"layers.{i}.mlp.w3", ctg::f32, 2, 16, 24>;
  using W2 = ctg::param<"layers.{i}.mlp.w2", ctg::f32, 2, 24, 16>;
  using store = test_util::leaf_store<
      ctg::param<"tok.weight", ctg::f32, 11, 16>, ctg::param<"pos.weight", ctg::f32, 8, 16>,
      ctg::param<"layers.{i}.ln1.scale", ctg::f32, 2, 16>, Wq, Wk, Wv, Wo, ctg::param<"layers.{i}.ln2.scale", ctg::f32, 2, 16>,
      W1, W3, W2, ctg::param<"ln_f.scale", ctg::f32, 16>, ctg::param<"lm_head.weight", ctg::f32, 16, 11>>;
  store s;
  float tag = 1.0f;
  auto fill = [&](auto p) {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = tag * 1000.0f + static_cast<float>(i);
    tag += 1.0f;
  };
  fill(s.param<Wq>()), fill(s.param<Wk>()), fill(s.param<Wv>()), fill(s.param<Wo>());
  fill(s.param<W1>()), fill(s.param<W3>()), fill(s.param<W2>());
  test_util::temp_dir dir("ctg_mut2_map_");
  for (const io::qkv style : {io::qkv::separate, io::qkv::fused}) {
    io::save_safetensors(dir / "t.safetensors", s, io::torch_transformer_map(style));
    const auto file = io::safetensors_file::read(dir / "t.safetensors");
    // file tensor [out, in] (row-major) of layer k against leaf [L, in, out] (ctg: x @ W), or
    // [L, out, in] as is for q/k/v (nn.Linear's layout, as ctg's).
    auto check = [&](const std::string& name, std::span<const float> leaf, std::size_t in, std::size_t out,
                     bool transposed, std::size_t row0 = 0) {
      const auto* t = file.find(name);
      REQUIRE(t != nullptr);
      for (std::size_t k = 0; k < 2; ++k) {
        const auto* tk = file.find("layers." + std::to_string(k) + name.substr(name.find('.', 7)));
        REQUIRE(tk != nullptr);
        const float* f = reinterpret_cast<const float*>(tk->data.data());
        std::size_t bad = 0;
        for (std::size_t o = 0; o < out; ++o)
          for (std::size_t i = 0; i < in; ++i) {
            const float want = transposed ? leaf[k * in * out + i * out + o] : leaf[k * in * out + o * in + i];
            float got;
            std::memcpy(&got, f + (row0 + o) * in + i, sizeof got);
            bad += got != want;
          }
        CAPTURE(name);
        CAPTURE(k);
        CHECK(bad == 0);
      }
    };
    check("layers.0.mlp.w1.weight", s.param<W1>(), 16, 24, true);
    check("layers.0.mlp.w3.weight", s.param<W3>(), 16, 24, true);
    check("layers.0.mlp.w2.weight", s.param<W2>(), 24, 16, true);
    check("layers.0.attn.wo.weight", s.param<Wo>(), 16, 16, true);
    if (style == io::qkv::separate) {
      check("layers.0.attn.wq.weight", s.param<Wq>(), 16, 16, false);
      check("layers.0.attn.wk.weight", s.param<Wk>(), 16, 16, false);
      check("layers.0.attn.wv.weight", s.param<Wv>(), 16, 16, false);
    } else {
      check("layers.0.attn.wqkv.weight", s.param<Wq>(), 16, 16, false, 0);
      check("layers.0.attn.wqkv.weight", s.param<Wk>(), 16, 16, false, 16);
      check("layers.0.attn.wqkv.weight", s.param<Wv>(), 16, 16, false, 32);
    }
  }
}

TEST_CASE("weights_only(): a model's FP8 state is in no tensor; a load starts it afresh") {
  // (A PyTorch file has no FP8 scales or amax histories: loading one into an
  // FP8 model was refused, "found no such tensor", for every state leaf. And
  // the state a store holds was taken from the weights the load replaces: a
  // scale of a few thousand clipped the loaded weights, loss 2.51 against
  // PyTorch's 0.44, until training steps moved it.)
  using W = ctg::param<"w", ctg::f32, 3, 4>;
  using SX = ctg::scaling::delayed<"x", ctg::precision::delayed<4>>;
  using SW = ctg::scaling::delayed<"w", ctg::precision::delayed<4>>;
  using SG = ctg::scaling::delayed<"g", ctg::precision::delayed<4>>;
  auto y = ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<ctg::e4m3, SX>(X{}), ctg::quantize<ctg::e4m3, SW>(W{}));
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(y)));
  using leaves = ctg::leaves_t<decltype(step)::nodes>;
  ctg::cpu::device dev;
  auto a = ctg::make_store(dev, step);
  auto b = ctg::make_store(dev, step);
  ctg::nn::init_params(a, 7, 0.5);
  ctg::nn::init_params(b, 8, 0.5);
  const std::vector<float> x{0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};
  step(b, ctg::feed<X>(std::span<const float>(x), 2));  // (b's scales and histories move from their initial values)
  std::vector<std::vector<float>> b_state;
  std::size_t states = 0;
  [&]<class... Ls>(ctg::tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (L::role == ctg::leaf_role::state) {
        const auto v = b.template param<L>();
        b_state.emplace_back(v.begin(), v.end());
        ++states;
      }
    };
    (one(std::type_identity<Ls>{}), ...);
  }(leaves{});
  REQUIRE(states >= 6);  // (three scales and three histories at least)
  temp_dir dir;
  io::save_safetensors(dir / "weights.safetensors", a, io::tensor_map{}.weights_only());
  const io::safetensors_file file = io::safetensors_file::read(dir / "weights.safetensors");
  CHECK(file.tensors().size() == 1);  // w only
  CHECK(file.find("w") != nullptr);
  // Without weights_only() the file lacks the state: refused, nothing written.
  const std::vector<float> b_w(b.param<W>().begin(), b.param<W>().end());
  const std::string m = message_of([&] { io::load_safetensors(dir / "weights.safetensors", b); });
  CHECK(m.find("scale'") != std::string::npos);  // (a state leaf: "tensor 'x.scale'")
  CHECK(m.find("found no such tensor (FP8 scaling state") != std::string::npos);
  CHECK(m.find("tensor_map{}.weights_only()") != std::string::npos);  // (the fix, named)
  CHECK(std::vector<float>(b.param<W>().begin(), b.param<W>().end()) == b_w);
  // With it: w is a's, the state a fresh store's (scales 1, histories 0),
  // not b's, which its step moved.
  io::load_safetensors(dir / "weights.safetensors", b, io::tensor_map{}.weights_only());
  CHECK(std::equal(b.param<W>().begin(), b.param<W>().end(), a.param<W>().begin()));
  auto fresh = ctg::make_store(dev, step);
  std::size_t k = 0, moved = 0;
  [&]<class... Ls>(ctg::tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (L::role == ctg::leaf_role::state) {
        const auto v = b.template param<L>(), f = fresh.template param<L>();
        CHECK(std::vector<float>(v.begin(), v.end()) == std::vector<float>(f.begin(), f.end()));
        moved += b_state[k++] != std::vector<float>(f.begin(), f.end());
      }
    };
    (one(std::type_identity<Ls>{}), ...);
  }(leaves{});
  CHECK(moved > 0);  // (b's step had moved some: the reset is seen)
  // A weights-only load that throws (a map entry for no leaf of the model)
  // resets nothing.
  step(b, ctg::feed<X>(std::span<const float>(x), 2));
  const auto moved_state = [&] {
    std::vector<std::vector<float>> out;
    [&]<class... Ls>(ctg::tl::list<Ls...>) {
      auto one = [&]<class L>(std::type_identity<L>) {
        if constexpr (L::role == ctg::leaf_role::state) {
          const auto v = b.template param<L>();
          out.emplace_back(v.begin(), v.end());
        }
      };
      (one(std::type_identity<Ls>{}), ...);
    }(leaves{});
    return out;
  };
  const auto before_failed = moved_state();
  CHECK(message_of([&] {
          io::load_safetensors(dir / "weights.safetensors", b, io::tensor_map{}.weights_only().add("nope", "nope"));
        }).find("'nope'") != std::string::npos);
  CHECK(moved_state() == before_failed);
  // The transformer map is weights only: its PyTorch twin has no FP8 state.
  CHECK(io::torch_transformer_map().skips_state());
}

namespace {
template <ctg::fixed_string P>
struct fp8_block {
  template <ctg::expr H>
  constexpr auto operator()(H h) const {
    using SX = ctg::scaling::delayed<P + ".x", ctg::precision::delayed<4>>;
    using SW = ctg::scaling::delayed<P + ".w", ctg::precision::delayed<4>>;
    using SG = ctg::scaling::delayed<P + ".g", ctg::precision::delayed<4>>;
    return ctg::tanh(ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<ctg::e4m3, SX>(h),
                                                   ctg::quantize<ctg::e4m3, SW>(ctg::param<P + ".w", ctg::f32, 3, 3>{})));
  }
};
}  // namespace

TEST_CASE("weights_only(): a stack's FP8 states (one per layer) start afresh too") {
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::nn::stack<2, fp8_block>(X{}))));
  using leaves = ctg::leaves_t<decltype(step)::nodes>;
  ctg::cpu::device dev;
  auto a = ctg::make_store(dev, step), b = ctg::make_store(dev, step), fresh = ctg::make_store(dev, step);
  ctg::nn::init_params(a, 7, 0.5);
  ctg::nn::init_params(b, 8, 0.5);
  const std::vector<float> x{0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};
  step(b, ctg::feed<X>(std::span<const float>(x), 2));
  temp_dir dir;
  io::save_safetensors(dir / "w.safetensors", a, io::tensor_map{}.weights_only());
  io::load_safetensors(dir / "w.safetensors", b, io::tensor_map{}.weights_only());
  std::size_t stacked = 0;
  [&]<class... Ls>(ctg::tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (L::role == ctg::leaf_role::state) {
        const auto v = b.template param<L>(), f = fresh.template param<L>();
        INFO(L::name.c_str());
        CHECK(std::vector<float>(v.begin(), v.end()) == std::vector<float>(f.begin(), f.end()));
        stacked += std::string_view(L::name.c_str()).find("{i}") != std::string_view::npos;
      }
    };
    (one(std::type_identity<Ls>{}), ...);
  }(leaves{});
  CHECK(stacked >= 6);  // (the layers' scales and histories: stacked leaves)
}

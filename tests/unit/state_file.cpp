// Save / load of params and AdamW state: a bitwise round trip that continues
// training identically, the byte format read back by an independent parser,
// and every kind of bad file (each prefix, each flipped byte, wrong dtype,
// dims, names) rejected with ctg::error and nothing written.
#include "error_message.hpp"
#include "temp_files.hpp"
#include <doctest/doctest.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/dist/checkpoint.hpp>
#include <ctg/optim/optim.hpp>

namespace fs = std::filesystem;

namespace {
using W = ctg::param<"w", ctg::f32, 3, 4>;
using B = ctg::param<"b", ctg::bf16, 4>;
using F = ctg::frozen<"f", ctg::f32, 4>;
using Q = ctg::param<"layers.{i}.attn.wq", ctg::f16, 2, 4>;  // a stacked layer's leaf
using O = ctg::frozen<"odd \"name\" \xc3\xbc {i}\t.", ctg::f32, 4>;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 3>;

auto tail() { return ctg::mean(ctg::square(ctg::cast<ctg::f32>(Q{}))); }
auto loss_a() { return ctg::mean(ctg::square(ctg::matmul(X{}, W{}) + ctg::cast<ctg::f32>(B{}) * F{} * O{})) + tail(); }

// Variants of the same model: w in bf16; w with other dims; no b.
using WB = ctg::param<"w", ctg::bf16, 3, 4>;
auto loss_dtype() {
  return ctg::mean(ctg::square(ctg::matmul(X{}, ctg::cast<ctg::f32>(WB{})) + ctg::cast<ctg::f32>(B{}) * F{} * O{})) +
         tail();
}
using W44 = ctg::param<"w", ctg::f32, 4, 4>;
using X4 = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
auto loss_dims() {
  return ctg::mean(ctg::square(ctg::matmul(X4{}, W44{}) + ctg::cast<ctg::f32>(B{}) * F{} * O{})) + tail();
}
auto loss_no_b() { return ctg::mean(ctg::square(ctg::matmul(X{}, W{}) + F{} * O{})) + tail(); }

template <class Loss>
struct model {
  using step_t = decltype(ctg::value_and_grad(std::declval<Loss>()));
  using store_t = decltype(ctg::make_store(std::declval<ctg::cpu::device>(), step_t{}));
  step_t step;
  ctg::cpu::device dev;
  store_t store = ctg::make_store(dev, step);
};
using model_a = model<decltype(loss_a())>;
using store_a = model_a::store_t;
using opt_a = ctg::optim::adamw<store_a>;

constexpr int batch = 4;

// Deterministic values for every stored leaf, shifted by `seed`.
template <class Store>
void init(Store& s, float seed) {
  using leaves = ctg::leaves_t<typename Store::step_type::nodes>;
  [&]<class... Ls>(ctg::tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (L::role != ctg::leaf_role::input) {
        auto p = s.template param<L>();
        for (std::size_t i = 0; i < p.size(); ++i)
          p[i] = ctg::store_as<typename L::dtype>(0.4f * std::sin(1.7f * static_cast<float>(i) + seed) + 0.1f);
      }
    };
    (one(std::type_identity<Ls>{}), ...);
  }(leaves{});
}

float run(model_a& m, int seed) {
  std::vector<float> x(batch * 3);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.9f * static_cast<float>(i) + static_cast<float>(seed));
  return m.step(m.store, ctg::feed<X>(std::span<const float>(x), batch));
}

template <class T>
std::vector<unsigned char> bytes_of(std::span<T> v) {
  std::vector<unsigned char> out(v.size_bytes());
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Everything save writes, as bytes, by record key.
using image = std::map<std::string, std::vector<unsigned char>>;
template <class Store>
image params_image(Store& s) {
  image out;
  using leaves = ctg::leaves_t<typename Store::step_type::nodes>;
  [&]<class... Ls>(ctg::tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (L::role != ctg::leaf_role::input) out[std::string("param ") + L::name.c_str()] = bytes_of(s.template param<L>());
    };
    (one(std::type_identity<Ls>{}), ...);
  }(leaves{});
  return out;
}
image full_image(store_a& s, const opt_a& o) {
  image out = params_image(s);
  out["master b"] = bytes_of(o.master<B>());
  out["master q"] = bytes_of(o.master<Q>());
  out["m w"] = bytes_of(o.exp_avg<W>());
  out["v w"] = bytes_of(o.exp_avg_sq<W>());
  out["m b"] = bytes_of(o.exp_avg<B>());
  out["v b"] = bytes_of(o.exp_avg_sq<B>());
  out["m q"] = bytes_of(o.exp_avg<Q>());
  out["v q"] = bytes_of(o.exp_avg_sq<Q>());
  const std::int64_t steps = o.steps();
  out["steps"] = bytes_of(std::span<const std::int64_t>(&steps, 1));
  const ctg::optim::adamw_config c = o.config();
  const float cfg[] = {c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, c.max_grad_norm};
  out["config"] = bytes_of(std::span<const float>(cfg));
  const auto decay = static_cast<std::int64_t>(c.decay);
  out["decay"] = bytes_of(std::span<const std::int64_t>(&decay, 1));
  return out;
}

using test_util::message_of;

struct temp_dir : test_util::temp_dir {
  temp_dir() : test_util::temp_dir("ctg_state_file_test_") {}
};
using test_util::read_all;
void write_all(const fs::path& p, const unsigned char* data, std::size_t n) {
  std::FILE* f = std::fopen(p.string().c_str(), "wb");
  REQUIRE(f);
  if (n) REQUIRE(std::fwrite(data, 1, n, f) == n);
  std::fclose(f);
}

const ctg::optim::adamw_config trained_cfg{.lr = 2e-2f, .beta1 = 0.85f, .beta2 = 0.99f, .eps = 1e-7f,
                                           .weight_decay = 0.05f, .max_grad_norm = 0.5f,
                                           .decay = ctg::optim::decay_leaves::matrices};

store_a& initialised(store_a& s, float seed) {
  init(s, seed);
  return s;
}

// A model trained for a few steps, and its optimizer.
struct trained {
  model_a m;
  opt_a opt;
  explicit trained(int steps) : opt(initialised(m.store, 0.0f), trained_cfg) {
    for (int s = 0; s < steps; ++s) {
      run(m, s);
      opt.step(m.store);
    }
  }
};

// A fresh model with other values and a default optimizer: what a load must overwrite.
struct fresh {
  model_a m;
  opt_a opt;
  fresh() : opt(initialised(m.store, 5.0f)) {}
  image snapshot() { return full_image(m.store, opt); }
};

// An independent reader of the documented format (assumes a well-formed file).
struct record {
  std::uint8_t kind, dtype;
  std::string name;
  std::vector<std::int64_t> dims;
  std::size_t data_offset;
  std::uint64_t bytes;
};
std::uint64_t le(const std::vector<unsigned char>& f, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t(f[at + static_cast<std::size_t>(i)]) << (8 * i);
  return v;
}
std::uint64_t fnv1a(const std::vector<unsigned char>& f, std::size_t n) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ f[i]) * 1099511628211ull;
  return h;
}
std::vector<record> records_of(const std::vector<unsigned char>& f) {
  std::vector<record> out;
  std::size_t at = 24;
  while (at < f.size() - 16) {
    record r{};
    const auto len = static_cast<std::size_t>(le(f, at, 4));
    r.name.assign(reinterpret_cast<const char*>(f.data() + at + 4), len);
    at += 4 + len;
    r.kind = f[at];
    r.dtype = f[at + 1];
    const std::size_t rank = f[at + 2];
    REQUIRE(f[at + 3] == 0);
    at += 4;
    for (std::size_t i = 0; i < rank; ++i, at += 8) r.dims.push_back(static_cast<std::int64_t>(le(f, at, 8)));
    r.bytes = le(f, at, 8);
    at += 8;
    r.data_offset = at;
    at += r.bytes;
    out.push_back(r);
  }
  REQUIRE(at == f.size() - 16);
  return out;
}
void reseal(std::vector<unsigned char>& f) {  // recompute the checksum after an edit
  const std::uint64_t h = fnv1a(f, f.size() - 8);
  for (int i = 0; i < 8; ++i) f[f.size() - 8 + static_cast<std::size_t>(i)] = static_cast<unsigned char>(h >> (8 * i));
}
void put_le(std::vector<unsigned char>& f, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) f[at + static_cast<std::size_t>(i)] = static_cast<unsigned char>(v >> (8 * i));
}
// The file f with version `version` and only the records `keep` accepts, re-framed and resealed.
template <class Keep>
std::vector<unsigned char> refile(const std::vector<unsigned char>& f, std::uint32_t version, Keep keep) {
  std::vector<unsigned char> g(f.begin(), f.begin() + 24);
  put_le(g, 8, version, 4);
  std::uint64_t count = 0;
  for (const record& r : records_of(f)) {
    if (!keep(r)) continue;
    const std::size_t start = r.data_offset - 8 - 8 * r.dims.size() - 4 - r.name.size() - 4;
    g.insert(g.end(), f.begin() + static_cast<std::ptrdiff_t>(start),
             f.begin() + static_cast<std::ptrdiff_t>(r.data_offset + r.bytes));
    ++count;
  }
  g.resize(g.size() + 16);
  put_le(g, 16, g.size(), 8);
  put_le(g, g.size() - 16, count, 8);
  reseal(g);
  return g;
}
}  // namespace

TEST_CASE("save then load restores everything bitwise, and training continues identically") {
  temp_dir dir;
  const fs::path path = dir / "ckpt.ctg";
  trained a(3);
  ctg::optim::save(path, a.m.store, a.opt);
  CHECK(dir.names() == std::set<std::string>{"ckpt.ctg"});  // (no temporary file left)

  fresh b;
  REQUIRE(b.snapshot() != full_image(a.m.store, a.opt));
  ctg::optim::load(path, b.m.store, b.opt);
  CHECK(b.snapshot() == full_image(a.m.store, a.opt));
  CHECK(b.opt.steps() == 3);
  CHECK(b.opt.config().weight_decay == trained_cfg.weight_decay);

  // a goes on uninterrupted; b resumes from the file: the same losses, norms and state.
  for (int s = 3; s < 7; ++s) {
    const float la = run(a.m, s), lb = run(b.m, s);
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    const float na = a.opt.step(a.m.store), nb = b.opt.step(b.m.store);
    CHECK(std::memcmp(&na, &nb, sizeof na) == 0);
    CHECK(b.snapshot() == full_image(a.m.store, a.opt));
  }

  // Saving over an existing file replaces it, again leaving no temporary file.
  ctg::optim::save(path, a.m.store, a.opt);
  CHECK(dir.names() == std::set<std::string>{"ckpt.ctg"});
  fresh c;
  ctg::optim::load(path, c.m.store, c.opt);
  CHECK(c.snapshot() == full_image(a.m.store, a.opt));
}

TEST_CASE("params-only files: round trip, ignored optimizer records, missing optimizer state") {
  temp_dir dir;
  trained a(2);
  ctg::optim::save(dir / "params.ctg", a.m.store);
  ctg::optim::save(dir / "full.ctg", a.m.store, a.opt);

  fresh b;
  ctg::optim::load(dir / "params.ctg", b.m.store);
  CHECK(params_image(b.m.store) == params_image(a.m.store));

  fresh c;
  ctg::optim::load(dir / "full.ctg", c.m.store);  // optimizer records ignored
  CHECK(params_image(c.m.store) == params_image(a.m.store));

  fresh d;
  const image before = d.snapshot();
  const std::string m = message_of([&] { ctg::optim::load(dir / "params.ctg", d.m.store, d.opt); });
  CHECK(m.find("no such record") != std::string::npos);
  CHECK((m.find("exp_avg 'w'") != std::string::npos || m.find("master 'b'") != std::string::npos ||
         m.find("exp_avg 'b'") != std::string::npos || m.find("master 'layers.{i}.attn.wq'") != std::string::npos ||
         m.find("exp_avg 'layers.{i}.attn.wq'") != std::string::npos));
  CHECK(d.snapshot() == before);
}

TEST_CASE("the file follows the documented byte layout") {
  temp_dir dir;
  trained a(2);
  a.m.store.seed(0x0123456789abcdefull);
  const fs::path path = dir / "ckpt.ctg";
  ctg::optim::save(path, a.m.store, a.opt);
  const std::vector<unsigned char> f = read_all(path);
  REQUIRE(f.size() > 40);
  CHECK(std::memcmp(f.data(), "CTGSTATE", 8) == 0);
  CHECK(le(f, 8, 4) == 3);
  CHECK(le(f, 12, 4) == 0);
  CHECK(le(f, 16, 8) == f.size());
  CHECK(le(f, f.size() - 8, 8) == fnv1a(f, f.size() - 8));
  const std::vector<record> recs = records_of(f);
  CHECK(le(f, f.size() - 16, 8) == recs.size());

  // (kind, name) -> (dtype, dims, bytes)
  std::map<std::pair<int, std::string>, std::tuple<int, std::vector<std::int64_t>, std::uint64_t>> got;
  for (const record& r : recs) CHECK(got.emplace(std::pair(int(r.kind), r.name), std::tuple(int(r.dtype), r.dims, r.bytes)).second);
  using dims = std::vector<std::int64_t>;
  const std::string odd = O::name.c_str();
  const std::map<std::pair<int, std::string>, std::tuple<int, dims, std::uint64_t>> want = {
      {{1, "w"}, {1, dims{3, 4}, 48}},
      {{1, "b"}, {3, dims{4}, 8}},
      {{1, "f"}, {1, dims{4}, 16}},
      {{1, "layers.{i}.attn.wq"}, {4, dims{2, 4}, 16}},
      {{1, odd}, {1, dims{4}, 16}},
      {{6, "seed"}, {8, dims{}, 8}},
      {{6, "steps_run"}, {8, dims{}, 8}},
      {{2, "b"}, {1, dims{4}, 16}},
      {{2, "layers.{i}.attn.wq"}, {1, dims{2, 4}, 32}},
      {{3, "w"}, {1, dims{3, 4}, 48}},
      {{4, "w"}, {1, dims{3, 4}, 48}},
      {{3, "b"}, {1, dims{4}, 16}},
      {{4, "b"}, {1, dims{4}, 16}},
      {{3, "layers.{i}.attn.wq"}, {1, dims{2, 4}, 32}},
      {{4, "layers.{i}.attn.wq"}, {1, dims{2, 4}, 32}},
      {{5, "adamw.step"}, {7, dims{}, 8}},
      {{5, "adamw.lr"}, {1, dims{}, 4}},
      {{5, "adamw.beta1"}, {1, dims{}, 4}},
      {{5, "adamw.beta2"}, {1, dims{}, 4}},
      {{5, "adamw.eps"}, {1, dims{}, 4}},
      {{5, "adamw.weight_decay"}, {1, dims{}, 4}},
      {{5, "adamw.max_grad_norm"}, {1, dims{}, 4}},
      {{5, "adamw.decay"}, {7, dims{}, 8}},
  };
  CHECK(got == want);
  // Data is the raw little-endian bytes.
  for (const record& r : recs) {
    const std::vector<unsigned char> data(f.begin() + static_cast<std::ptrdiff_t>(r.data_offset),
                                          f.begin() + static_cast<std::ptrdiff_t>(r.data_offset + r.bytes));
    if (r.kind == 1 && r.name == "w") CHECK(data == bytes_of(a.m.store.param<W>()));
    if (r.kind == 1 && r.name == "b") CHECK(data == bytes_of(a.m.store.param<B>()));
    if (r.kind == 2 && r.name == "b") CHECK(data == bytes_of(a.opt.master<B>()));
    if (r.kind == 4 && r.name == "layers.{i}.attn.wq") CHECK(data == bytes_of(a.opt.exp_avg_sq<Q>()));
    if (r.kind == 5 && r.name == "adamw.step") CHECK(le(f, r.data_offset, 8) == 2);
    if (r.kind == 6 && r.name == "seed") CHECK(le(f, r.data_offset, 8) == 0x0123456789abcdefull);
    if (r.kind == 6 && r.name == "steps_run") CHECK(le(f, r.data_offset, 8) == 2);
  }
}

TEST_CASE("every truncated prefix, an appended byte and every flipped byte are rejected, changing nothing") {
  temp_dir dir;
  trained a(2);
  ctg::optim::save(dir / "ckpt.ctg", a.m.store, a.opt);
  const std::vector<unsigned char> f = read_all(dir / "ckpt.ctg");
  fresh b;
  const image before = b.snapshot();
  const fs::path bad = dir / "bad.ctg";
  std::size_t rejected = 0;
  for (std::size_t n = 0; n < f.size(); ++n) {
    write_all(bad, f.data(), n);
    const std::string m = message_of([&] { ctg::optim::load(bad, b.m.store, b.opt); });
    INFO("prefix of " << n << " bytes: " << m);
    CHECK(m.rfind("ctg: ", 0) == 0);
    rejected += m.rfind("ctg: ", 0) == 0;
    if (n >= 8) CHECK(m.find("truncated") != std::string::npos);
  }
  CHECK(rejected == f.size());
  CHECK(b.snapshot() == before);

  std::vector<unsigned char> longer = f;
  longer.push_back(0);
  write_all(bad, longer.data(), longer.size());
  CHECK(message_of([&] { ctg::optim::load(bad, b.m.store, b.opt); }).find("ctg: state file") != std::string::npos);

  rejected = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80}) {
      std::vector<unsigned char> g = f;
      g[i] ^= mask;
      write_all(bad, g.data(), g.size());
      const std::string m = message_of([&] { ctg::optim::load(bad, b.m.store, b.opt); });
      INFO("byte " << i << " ^ " << int(mask) << ": " << m);
      CHECK(m.rfind("ctg: ", 0) == 0);
      rejected += m.rfind("ctg: ", 0) == 0;
    }
  }
  CHECK(rejected == 2 * f.size());
  CHECK(b.snapshot() == before);
  // Flipping a data byte is caught by the checksum.
  std::vector<unsigned char> g = f;
  g[f.size() / 2] ^= 0x10;
  write_all(bad, g.data(), g.size());
  CHECK(message_of([&] { ctg::optim::load(bad, b.m.store, b.opt); }).find("checksum") != std::string::npos);
}

TEST_CASE("wrong magic and wrong version are named") {
  temp_dir dir;
  trained a(1);
  ctg::optim::save(dir / "ckpt.ctg", a.m.store);
  std::vector<unsigned char> f = read_all(dir / "ckpt.ctg");
  fresh b;
  const image before = b.snapshot();
  std::vector<unsigned char> g = f;
  std::memcpy(g.data(), "NOTSTATE", 8);
  write_all(dir / "bad.ctg", g.data(), g.size());
  std::string m = message_of([&] { ctg::optim::load(dir / "bad.ctg", b.m.store); });
  CHECK(m.find("not a ctg state file") != std::string::npos);
  CHECK(m.find("NOTSTATE") != std::string::npos);
  g = f;
  g[8] = 4;
  reseal(g);
  write_all(dir / "bad.ctg", g.data(), g.size());
  m = message_of([&] { ctg::optim::load(dir / "bad.ctg", b.m.store); });
  CHECK(m.find("version 4") != std::string::npos);
  CHECK(m.find("expected 1 to 3") != std::string::npos);
  CHECK(b.snapshot() == before);
}

TEST_CASE("a leaf with another dtype, other dims, missing or extra is named with expected and found values") {
  temp_dir dir;
  trained a(1);
  const fs::path full = dir / "a.ctg";
  ctg::optim::save(full, a.m.store, a.opt);

  // Loading `full` into a fresh model of another graph fails naming the leaf and both values, and changes nothing.
  auto expect_rejected = [&]<class Loss>(std::type_identity<Loss>, const char* leaf, const char* what) {
    model<Loss> md;
    init(md.store, 3.0f);
    const image before = params_image(md.store);
    const std::string m = message_of([&] { ctg::optim::load(full, md.store); });
    CHECK(m.find(leaf) != std::string::npos);
    CHECK(m.find(what) != std::string::npos);
    CHECK(params_image(md.store) == before);
  };
  expect_rejected(std::type_identity<decltype(loss_dtype())>{}, "param 'w'", "expected dtype bf16, found f32");
  expect_rejected(std::type_identity<decltype(loss_dims())>{}, "param 'w'", "expected dims [4, 4], found [3, 4]");
  {
    // The file has b, the model does not.
    model<decltype(loss_no_b())> md;
    init(md.store, 3.0f);
    const image before = params_image(md.store);
    const std::string m = message_of([&] { ctg::optim::load(full, md.store); });
    CHECK(m.find("param 'b'") != std::string::npos);
    CHECK(m.find("not in this model") != std::string::npos);
    CHECK(params_image(md.store) == before);

    // The model has b, the file does not.
    ctg::optim::save(dir / "no_b.ctg", md.store);
    fresh b;
    const image before_b = b.snapshot();
    const std::string m2 = message_of([&] { ctg::optim::load(dir / "no_b.ctg", b.m.store); });
    CHECK(m2.find("param 'b'") != std::string::npos);
    CHECK(m2.find("expected bf16 [4], found no such record") != std::string::npos);
    CHECK(b.snapshot() == before_b);
  }
}

TEST_CASE("invalid optimizer scalars, moments and masters in a well-formed file are rejected before anything is written") {
  temp_dir dir;
  trained a(2);
  ctg::optim::save(dir / "ckpt.ctg", a.m.store, a.opt);
  const std::vector<unsigned char> f = read_all(dir / "ckpt.ctg");
  fresh b;
  const image before = b.snapshot();
  for (const record& r : records_of(f)) {
    if (r.kind != 5 || (r.name != "adamw.beta1" && r.name != "adamw.step")) continue;
    std::vector<unsigned char> g = f;
    if (r.name == "adamw.beta1") {
      const float v = 1.5f;
      std::memcpy(g.data() + r.data_offset, &v, 4);
    } else {
      const std::int64_t v = -3;
      std::memcpy(g.data() + r.data_offset, &v, 8);
    }
    reseal(g);
    write_all(dir / "bad.ctg", g.data(), g.size());
    const std::string m = message_of([&] { ctg::optim::load(dir / "bad.ctg", b.m.store, b.opt); });
    CHECK(m.find(r.name == "adamw.beta1" ? "beta1" : "adamw.step") != std::string::npos);
    CHECK(b.snapshot() == before);
  }
  // Moments and masters a well-formed file holds: NaN, inf, or a negative
  // second moment (the next update wrote NaN into the weight).
  for (const record& r : records_of(f)) {
    if (r.kind < 2 || r.kind > 4 || r.dtype != 1) continue;  // (master, exp_avg, exp_avg_sq in f32)
    const std::size_t last = r.bytes / 4 - 1;
    for (const std::size_t at : {std::size_t{1}, last})  // (every element is checked: the last too)
      for (const float v : {NAN, INFINITY, -1.0f}) {
        if (v == -1.0f && r.kind != 4) continue;  // (a master or a first moment may be negative)
        std::vector<unsigned char> g = f;
        std::memcpy(g.data() + r.data_offset + 4 * at, &v, 4);
        reseal(g);
        write_all(dir / "bad.ctg", g.data(), g.size());
        const std::string m = message_of([&] { ctg::optim::load(dir / "bad.ctg", b.m.store, b.opt); });
        INFO(r.name, " element ", at, " ", v, ": ", m);
        CHECK(m.find("'" + r.name + "': element " + std::to_string(at) + " is ") != std::string::npos);
        CHECK(m.find("the file is corrupt; nothing was loaded") != std::string::npos);
        CHECK(b.snapshot() == before);
      }
  }
  // A duplicated record is rejected too: append a copy of the first record.
  std::vector<unsigned char> g(f.begin(), f.end() - 16);
  const record first = records_of(f).front();
  g.insert(g.end(), f.begin() + 24, f.begin() + static_cast<std::ptrdiff_t>(first.data_offset + first.bytes));
  const std::uint64_t count = records_of(f).size() + 1, size = g.size() + 16;
  for (int i = 0; i < 8; ++i) g.push_back(static_cast<unsigned char>(count >> (8 * i)));
  for (int i = 0; i < 8; ++i) g.push_back(0);
  for (int i = 0; i < 8; ++i) g[16 + static_cast<std::size_t>(i)] = static_cast<unsigned char>(size >> (8 * i));
  reseal(g);
  write_all(dir / "dup.ctg", g.data(), g.size());
  const std::string m = message_of([&] { ctg::optim::load(dir / "dup.ctg", b.m.store, b.opt); });
  CHECK(m.find("occurs twice") != std::string::npos);
  CHECK(m.find("'" + first.name + "'") != std::string::npos);
  CHECK(b.snapshot() == before);
  // A second moment of 0 or -0 is one a run writes (a gradient element that
  // stayed 0; an optimizer saved before its first update): it loads.
  for (const record& r : records_of(f)) {
    if (r.kind != 4 || r.dtype != 1) continue;
    for (const float v : {0.0f, -0.0f}) {
      std::vector<unsigned char> z = f;
      std::memcpy(z.data() + r.data_offset + r.bytes - 4, &v, 4);
      reseal(z);
      write_all(dir / "zero.ctg", z.data(), z.size());
      INFO(r.name, " ", v);
      CHECK(message_of([&] { ctg::optim::load(dir / "zero.ctg", b.m.store, b.opt); }) == "<no ctg::error thrown>");
    }
  }
  fresh unstepped, into;
  ctg::optim::save(dir / "unstepped.ctg", unstepped.m.store, unstepped.opt);
  CHECK(message_of([&] { ctg::optim::load(dir / "unstepped.ctg", into.m.store, into.opt); }) ==
        "<no ctg::error thrown>");
  CHECK(into.snapshot() == unstepped.snapshot());
}

TEST_CASE("structural corruption behind a valid checksum is rejected") {
  temp_dir dir;
  trained a(1);
  ctg::optim::save(dir / "ckpt.ctg", a.m.store, a.opt);
  const std::vector<unsigned char> f = read_all(dir / "ckpt.ctg");
  const std::vector<record> recs = records_of(f);
  fresh b;
  const image before = b.snapshot();
  auto load_edited = [&](auto&& edit) {
    std::vector<unsigned char> g = f;
    edit(g);
    reseal(g);
    write_all(dir / "bad.ctg", g.data(), g.size());
    return message_of([&] { ctg::optim::load(dir / "bad.ctg", b.m.store, b.opt); });
  };
  // The trailer's record count.
  CHECK(load_edited([&](auto& g) { g[g.size() - 16] ^= 1; }).find("trailer says") != std::string::npos);
  // A record's kind and dtype codes (they sit right after its name).
  const record& r0 = recs.front();
  const std::size_t codes = 24 + 4 + r0.name.size();
  CHECK(load_edited([&](auto& g) { g[codes] = 9; }).find("kind 9") != std::string::npos);
  CHECK(load_edited([&](auto& g) { g[codes + 1] = 0; }).find("dtype code 0") != std::string::npos);
  CHECK(load_edited([&](auto& g) { g[codes + 3] = 1; }).find("reserved") != std::string::npos);
  // A byte count that disagrees with dtype and dims.
  CHECK(load_edited([&](auto& g) { g[r0.data_offset - 8] ^= 4; }).find("data bytes") != std::string::npos);
  // A name length running past the end.
  CHECK(load_edited([&](auto& g) { g[24 + 3] = 0x7f; }).find("runs past the end") != std::string::npos);
  CHECK(b.snapshot() == before);
}

TEST_CASE("I/O failures name the path and leave no .tmp behind") {
  temp_dir dir;
  trained a(1);
  const fs::path nowhere = dir / "no_such_dir" / "x.ctg";
  std::string m = message_of([&] { ctg::optim::save(nowhere, a.m.store, a.opt); });
  CHECK(m.find("no_such_dir") != std::string::npos);
  m = message_of([&] { ctg::optim::load(dir / "missing.ctg", a.m.store); });
  CHECK(m.find("missing.ctg") != std::string::npos);
  // The target is a non-empty directory: the rename fails, the .tmp is removed.
  const fs::path target = dir / "a_dir";
  fs::create_directories(target / "inside");
  m = message_of([&] { ctg::optim::save(target, a.m.store); });
  CHECK(m.find("a_dir") != std::string::npos);
  CHECK(dir.names() == std::set<std::string>{"a_dir"});
  // A device is not a state file (reading /dev/zero took all memory).
  if (fs::exists("/dev/zero")) {
    m = message_of([&] { ctg::optim::load("/dev/zero", a.m.store); });
    CHECK(m == "ctg: cannot read state file '/dev/zero': not a regular file");
  }
}

TEST_CASE("saves to one path at once, from two threads: each completes, and the file is one of them whole") {
  // (They shared one "<path>.tmp": one renamed the other's half-written
  // file over the last good one, the other's rename then failed.)
  temp_dir dir;
  const fs::path path = dir / "ckpt.ctg";
  trained a(1), b(2);
  const auto image_a = full_image(a.m.store, a.opt), image_b = full_image(b.m.store, b.opt);
  REQUIRE(image_a != image_b);
  std::atomic<int> failed{0};
  auto saver = [&](trained& t) {
    for (int i = 0; i < 40; ++i) try {
        ctg::optim::save(path, t.m.store, t.opt);
      } catch (const ctg::error&) {
        ++failed;
      }
  };
  std::thread ta(saver, std::ref(a)), tb(saver, std::ref(b));
  ta.join(), tb.join();
  CHECK(failed == 0);
  fresh c;
  ctg::optim::load(path, c.m.store, c.opt);
  CHECK((c.snapshot() == image_a || c.snapshot() == image_b));
  CHECK(dir.names() == std::set<std::string>{"ckpt.ctg"});
}

TEST_CASE("a version-1 file loads what it holds and leaves the store's seed and step count as they are") {
  temp_dir dir;
  trained a(2);
  ctg::optim::save(dir / "v2.ctg", a.m.store, a.opt);
  const std::vector<unsigned char> f = read_all(dir / "v2.ctg");
  // Version 1 as it was written before the store records (and AdamW's decay) existed.
  const std::vector<unsigned char> v1 =
      refile(f, 1, [](const record& r) { return r.kind != 6 && r.name != "adamw.decay"; });
  write_all(dir / "v1.ctg", v1.data(), v1.size());
  fresh b;
  b.m.store.seed(7);
  b.m.store.set_steps_run(5);
  ctg::optim::load(dir / "v1.ctg", b.m.store, b.opt);
  image file_image = full_image(a.m.store, a.opt);
  const auto every_leaf = static_cast<std::int64_t>(ctg::optim::decay_leaves::every_leaf);
  file_image["decay"] = bytes_of(std::span<const std::int64_t>(&every_leaf, 1));  // (the file has none: every leaf)
  CHECK(b.snapshot() == file_image);
  CHECK(b.m.store.seed() == 7);
  CHECK(b.m.store.steps_run() == 5);
  fresh c;
  ctg::optim::load(dir / "v1.ctg", c.m.store);
  CHECK(params_image(c.m.store) == params_image(a.m.store));
  // dist::load too (it loads into a store of its own first: it handed on
  // that store's seed and count, 0 and 0, where the file had none).
  fresh d;
  d.m.store.seed(7);
  d.m.store.set_steps_run(5);
  {
    ctg::dist::data_parallel dp(d.m.store, ctg::dist::emulate{2});
    ctg::dist::sharded_adamw opt(dp);
    ctg::dist::load((dir / "v1.ctg").string(), dp, opt);
    CHECK(d.m.store.seed() == 7);
  }
  CHECK(d.m.store.steps_run() == 5);
  CHECK(params_image(d.m.store) == params_image(a.m.store));

  // A store record (kind 6) or a u64 (dtype 8) has no meaning in version 1: the file is corrupt.
  const image before = b.snapshot();
  std::vector<unsigned char> g = f;
  put_le(g, 8, 1, 4);
  reseal(g);
  write_all(dir / "bad.ctg", g.data(), g.size());
  std::string m = message_of([&] { ctg::optim::load(dir / "bad.ctg", b.m.store, b.opt); });
  CHECK(m.find("kind 6, expected 1..5 in a version-1 file") != std::string::npos);
  g = refile(f, 1, [](const record& r) { return (r.kind != 6 || r.name == "seed") && r.name != "adamw.decay"; });
  for (const record& r : records_of(g))
    if (r.kind == 6) g[r.data_offset - 8 - 4] = 5;  // its kind byte (rank 0): now an optimizer scalar
  reseal(g);
  write_all(dir / "bad.ctg", g.data(), g.size());
  m = message_of([&] { ctg::optim::load(dir / "bad.ctg", b.m.store, b.opt); });
  CHECK(m.find("dtype code 8, expected 1..7 in a version-1 file") != std::string::npos);
  CHECK(b.snapshot() == before);
  CHECK(b.m.store.seed() == 7);
  CHECK(b.m.store.steps_run() == 5);
}

TEST_CASE("AdamW's decay choice is in files since version 3: a version-2 file's is every leaf; a bad code is refused") {
  temp_dir dir;
  trained a(2);  // (decay_leaves::matrices)
  ctg::optim::save(dir / "v3.ctg", a.m.store, a.opt);
  const std::vector<unsigned char> f = read_all(dir / "v3.ctg");
  std::size_t decay_at = 0;
  for (const record& r : records_of(f))
    if (r.name == "adamw.decay") {
      CHECK(r.kind == 5);   // an optimizer scalar
      CHECK(r.dtype == 7);  // i64
      CHECK(r.dims.empty());
      CHECK(le(f, r.data_offset, 8) == 1);  // matrices
      decay_at = r.data_offset;
    }
  REQUIRE(decay_at != 0);
  CHECK(le(f, 8, 4) == 3);
  // A file with no record newer than version 2 (the store's alone) is
  // version 2, which the readers before version 3 read.
  ctg::optim::save(dir / "params.ctg", a.m.store);
  CHECK(le(read_all(dir / "params.ctg"), 8, 4) == 2);

  fresh b;  // (decay of every leaf: the default)
  REQUIRE(b.opt.config().decay == ctg::optim::decay_leaves::every_leaf);
  ctg::optim::load(dir / "v3.ctg", b.m.store, b.opt);
  CHECK(b.snapshot() == full_image(a.m.store, a.opt));

  // Version 2, as written before: no decay record. Every run that wrote
  // one decayed every leaf, so its load does too, whatever the optimizer's
  // was; everything else is the file's.
  const std::vector<unsigned char> v2 = refile(f, 2, [](const record& r) { return r.name != "adamw.decay"; });
  write_all(dir / "v2.ctg", v2.data(), v2.size());
  model_a c;
  opt_a c_opt(initialised(c.store, 5.0f), {.decay = ctg::optim::decay_leaves::matrices});
  ctg::optim::load(dir / "v2.ctg", c.store, c_opt);
  CHECK(c_opt.config().decay == ctg::optim::decay_leaves::every_leaf);
  CHECK(c_opt.config().lr == trained_cfg.lr);
  image file_image = full_image(a.m.store, a.opt);
  const auto every_leaf = static_cast<std::int64_t>(ctg::optim::decay_leaves::every_leaf);
  file_image["decay"] = bytes_of(std::span<const std::int64_t>(&every_leaf, 1));
  CHECK(full_image(c.store, c_opt) == file_image);
  // A version-2 file the optimizer refuses (lr -1) changes nothing: the
  // decay it was about to get is put back too.
  std::vector<unsigned char> v2_bad = v2;
  for (const record& r : records_of(v2_bad))
    if (r.name == "adamw.lr") put_le(v2_bad, r.data_offset, std::bit_cast<std::uint32_t>(-1.0f), 4);
  reseal(v2_bad);
  write_all(dir / "v2_bad.ctg", v2_bad.data(), v2_bad.size());
  model_a e;
  opt_a e_opt(initialised(e.store, 5.0f), {.lr = 3e-3f, .decay = ctg::optim::decay_leaves::matrices});
  CHECK(message_of([&] { ctg::optim::load(dir / "v2_bad.ctg", e.store, e_opt); }).find("lr") != std::string::npos);
  CHECK(e_opt.config().decay == ctg::optim::decay_leaves::matrices);
  CHECK(e_opt.config().lr == 3e-3f);

  // A version-2 file with the record: one it cannot hold. A code that is
  // no decay_leaves: refused, nothing changed.
  const std::vector<unsigned char> v2_with = refile(f, 2, [](const record&) { return true; });
  write_all(dir / "bad.ctg", v2_with.data(), v2_with.size());
  fresh d;
  const image before = d.snapshot();
  std::string m = message_of([&] { ctg::optim::load(dir / "bad.ctg", d.m.store, d.opt); });
  CHECK(m.find("'adamw.decay' is a record of version 3 files, found in a version-2 file") != std::string::npos);
  std::vector<unsigned char> g = f;
  put_le(g, decay_at, 7, 8);
  reseal(g);
  write_all(dir / "bad.ctg", g.data(), g.size());
  m = message_of([&] { ctg::optim::load(dir / "bad.ctg", d.m.store, d.opt); });
  CHECK(m.find("decay must be") != std::string::npos);
  CHECK(m.find("found 7") != std::string::npos);
  CHECK(d.snapshot() == before);
}

TEST_CASE("a step count past 2^32 loads whole: the count is 64-bit") {
  // (It was 32-bit: such a file was refused, and a store's masks repeated
  // after 2^32 runs: tests/unit/dropout.cpp.)
  temp_dir dir;
  trained a(2);
  ctg::optim::save(dir / "ckpt.ctg", a.m.store, a.opt);
  std::vector<unsigned char> g = read_all(dir / "ckpt.ctg");
  const std::uint64_t far = (std::uint64_t(1) << 32) + 5;
  for (const record& r : records_of(g))
    if (r.kind == 6 && r.name == "steps_run") put_le(g, r.data_offset, far, 8);
  reseal(g);
  write_all(dir / "far.ctg", g.data(), g.size());
  fresh b;
  ctg::optim::load(dir / "far.ctg", b.m.store, b.opt);
  CHECK(b.m.store.steps_run() == far);
  ctg::optim::save(dir / "again.ctg", b.m.store, b.opt);
  CHECK(read_all(dir / "again.ctg") == g);
}

namespace {
// A second optimizer, written here: it takes part in save/load through the
// same hook as AdamW, with no edit in ctg/io/.
struct momentum_sgd {
  using store_type = store_a;
  std::vector<float> momentum_w = std::vector<float>(W::dims::static_numel);
  std::int64_t steps = 0;
  float lr = 0.1f;

  template <class Records>
  void state_records(Records& r) {
    describe(*this, r);
  }
  template <class Records>
  void state_records(Records& r) const {
    describe(*this, r);
  }
  void validate_state() const {
    if (!(lr > 0.0f)) throw ctg::error("ctg: sgd: lr must be > 0, found " + std::to_string(lr));
  }

 private:
  template <class Self, class Records>
  static void describe(Self& self, Records& r) {
    r.template leaf<"exp_avg", W>(std::span(self.momentum_w));
    r.scalar("sgd.steps", self.steps);
    r.scalar("sgd.lr", self.lr);
  }
};
}  // namespace

TEST_CASE("another optimizer takes part through state_records() and validate_state()") {
  temp_dir dir;
  trained a(1);
  momentum_sgd sgd;
  for (std::size_t i = 0; i < sgd.momentum_w.size(); ++i) sgd.momentum_w[i] = 0.5f * static_cast<float>(i);
  sgd.steps = 4;
  sgd.lr = 0.25f;
  ctg::io::save(dir / "sgd.ctg", a.m.store, sgd);

  fresh b;
  momentum_sgd loaded;
  ctg::io::load(dir / "sgd.ctg", b.m.store, loaded);
  CHECK(params_image(b.m.store) == params_image(a.m.store));
  CHECK(loaded.momentum_w == sgd.momentum_w);
  CHECK(loaded.steps == 4);
  CHECK(loaded.lr == 0.25f);
  // AdamW's records are not this optimizer's.
  const std::string m = message_of([&] { ctg::io::load(dir / "sgd.ctg", b.m.store, b.opt); });
  CHECK(m.find("no such record") != std::string::npos);

  // A value the optimizer rejects: nothing is written, its scalars are put back.
  std::vector<unsigned char> g = read_all(dir / "sgd.ctg");
  for (const record& r : records_of(g))
    if (r.name == "sgd.lr") std::memset(g.data() + r.data_offset, 0, 4);
  reseal(g);
  write_all(dir / "bad.ctg", g.data(), g.size());
  fresh c;
  const image before = params_image(c.m.store);
  momentum_sgd untouched;
  const std::string bad = message_of([&] { ctg::io::load(dir / "bad.ctg", c.m.store, untouched); });
  CHECK(bad.find("ctg: state file") != std::string::npos);
  CHECK(bad.find("sgd: lr must be > 0, found 0") != std::string::npos);
  CHECK(params_image(c.m.store) == before);
  CHECK(untouched.momentum_w == momentum_sgd{}.momentum_w);
  CHECK(untouched.steps == 0);
  CHECK(untouched.lr == 0.1f);
}

#pragma once
// Save and load a model's parameters, and optionally an AdamW optimizer's
// state, to one binary file.
//
//   ctg::optim::save("ckpt.ctg", store, opt);   // params (trainable and frozen) + optimizer
//   ctg::optim::load("ckpt.ctg", store, opt);   // into a store/optimizer of the same model
//   ctg::optim::save("model.ctg", store);       // params only
//   ctg::optim::load("model.ctg", store);       // params only (optimizer records are ignored)
//
// save writes `path + ".tmp"` (and fsyncs it where POSIX is available), then
// renames it over `path` with std::filesystem::rename, so `path` holds either
// the old file or the complete new one (the directory itself is not
// fsynced). I/O failures throw ctg::error naming the path; the .tmp file is
// removed.
//
// load reads the whole file into memory and checks all of it before it
// writes anything. Any problem throws ctg::error and leaves the store and the
// optimizer untouched: a wrong magic or version, a truncated file, a bad checksum, a malformed or
// duplicated record, a record missing for a leaf (or for optimizer state), a
// record the model does not have, or a record whose dtype, dims or byte count
// differ from the model's. The message names the record ("param 'mlp.w1'"),
// the expected and the found value. load(path, store, opt) requires exactly
// the records save(path, store, opt) writes for this model; load(path, store)
// requires exactly the param records and ignores the others. load also
// restores the optimizer's configuration (lr, betas, eps, weight_decay,
// max_grad_norm), as torch's load_state_dict restores param_groups.
//
// ---------------------------------------------------------------- format ----
// Version 1. Integers are little-endian; i64 is two's complement; element
// data is little-endian IEEE (bf16/f16/fp8: their bit patterns), row-major.
//
//   header, 24 bytes
//     [0, 8)    magic: the ASCII bytes "CTGSTATE" (no terminator)
//     [8, 12)   u32 version = 1
//     [12, 16)  u32 flags = 0 (reserved; a reader of version 1 rejects others)
//     [16, 24)  u64 file size in bytes, header and trailer included
//   records, back to back from offset 24, each:
//     u32       name length n in bytes
//     n bytes   name: the leaf's name exactly (any bytes, e.g. "layers.{i}.attn.wq"),
//               or the optimizer scalar's name; no terminator
//     u8        kind: 1 param      a stored leaf's value (trainable or frozen), in its dtype
//                     2 master     f32 master copy of a trainable non-f32 leaf
//                     3 exp_avg    f32 first moment of a trainable leaf
//                     4 exp_avg_sq f32 second moment of a trainable leaf
//                     5 scalar     an optimizer scalar, rank 0:
//                                    "adamw.step" i64; "adamw.lr", "adamw.beta1", "adamw.beta2",
//                                    "adamw.eps", "adamw.weight_decay", "adamw.max_grad_norm" f32
//     u8        dtype: 1 f32, 2 f64, 3 bf16, 4 f16, 5 e4m3, 6 e5m2, 7 i64
//     u8        rank r
//     u8        reserved = 0
//     r x i64   dims
//     u64       byte count b = product(dims) * element size (1 for rank 0)
//     b bytes   data
//   A (kind, name) pair occurs at most once. save writes the params in the
//   step's topological leaf order, then per trainable leaf (Step::wrt order)
//   master (if any), exp_avg, exp_avg_sq, then the scalars; readers must not
//   depend on the order.
//   trailer, 16 bytes
//     u64       record count
//     u64       checksum: FNV-1a 64 (offset basis 0xcbf29ce484222325, prime
//               0x100000001b3, one byte at a time) of every byte before it,
//               i.e. header, records and record count.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <ctg/core/error.hpp>
#include <ctg/optim/adamw.hpp>

#if __has_include(<unistd.h>)
#include <unistd.h>
#define CTG_STATE_FILE_HAVE_FSYNC 1
#endif

namespace ctg::optim {

namespace state_format {
inline constexpr char magic[8] = {'C', 'T', 'G', 'S', 'T', 'A', 'T', 'E'};
inline constexpr std::uint32_t version = 1;
inline constexpr std::size_t header_bytes = 24;
inline constexpr std::size_t trailer_bytes = 16;
enum class kind : std::uint8_t { param = 1, master = 2, exp_avg = 3, exp_avg_sq = 4, scalar = 5 };
enum class dtype : std::uint8_t { f32 = 1, f64 = 2, bf16 = 3, f16 = 4, e4m3 = 5, e5m2 = 6, i64 = 7 };

template <class T>
inline constexpr dtype dtype_of = [] {
  if constexpr (std::is_same_v<T, f32>) return dtype::f32;
  else if constexpr (std::is_same_v<T, f64>) return dtype::f64;
  else if constexpr (std::is_same_v<T, bf16>) return dtype::bf16;
  else if constexpr (std::is_same_v<T, f16>) return dtype::f16;
  else if constexpr (std::is_same_v<T, e4m3>) return dtype::e4m3;
  else if constexpr (std::is_same_v<T, e5m2>) return dtype::e5m2;
  else {
    static_assert(std::is_same_v<T, std::int64_t>, "ctg: no state-file dtype code for this type");
    return dtype::i64;
  }
}();

inline std::uint64_t fnv1a64(const unsigned char* p, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
}  // namespace state_format

namespace detail {
namespace sf = state_format;

inline const char* kind_name(std::uint8_t k) {
  switch (k) {
    case 1: return "param";
    case 2: return "master";
    case 3: return "exp_avg";
    case 4: return "exp_avg_sq";
    case 5: return "scalar";
    default: return nullptr;
  }
}
inline const char* dtype_name(std::uint8_t d) {
  switch (d) {
    case 1: return "f32";
    case 2: return "f64";
    case 3: return "bf16";
    case 4: return "f16";
    case 5: return "e4m3";
    case 6: return "e5m2";
    case 7: return "i64";
    default: return nullptr;
  }
}
inline std::size_t dtype_size(std::uint8_t d) {
  switch (d) {
    case 1: return 4;
    case 2: return 8;
    case 3: case 4: return 2;
    case 5: case 6: return 1;
    case 7: return 8;
    default: return 0;
  }
}
inline std::string dims_text(const std::int64_t* d, std::size_t rank) {
  std::string s = "[";
  for (std::size_t i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// One record the model has: its source (save) or destination (load).
struct record_desc {
  sf::kind kind;
  std::string_view name;
  std::uint8_t dtype;
  std::uint8_t rank;
  std::int64_t dims[max_rank]{};
  std::size_t elem_size;
  std::size_t count;  // elements
  std::byte* data;    // read by save; written by load (only after every check passed)
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(elem_size) * count; }
  std::string what() const { return std::string(kind_name(static_cast<std::uint8_t>(kind))) + " '" + std::string(name) + "'"; }
};

template <class T>
record_desc desc_of(sf::kind k, std::string_view name, std::span<T> data, const std::int64_t* dims, std::size_t rank) {
  using E = std::remove_const_t<T>;
  record_desc r{k, name, static_cast<std::uint8_t>(sf::dtype_of<E>), static_cast<std::uint8_t>(rank), {},
                sizeof(E), data.size(), reinterpret_cast<std::byte*>(const_cast<E*>(data.data()))};
  for (std::size_t i = 0; i < rank; ++i) r.dims[i] = dims[i];
  return r;
}

template <class L>
constexpr std::string_view leaf_name() {
  return std::string_view(L::name.c_str());
}

// Every stored leaf (params and frozen) of the store's step, in topological order.
template <class Store>
void param_records(std::vector<record_desc>& out, Store& s) {
  using leaves = leaves_t<typename Store::step_type::nodes>;
  [&]<class... Ls>(tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (L::role != leaf_role::input) {
        const auto& d = L::dims::dims;
        out.push_back(desc_of(sf::kind::param, leaf_name<L>(), s.template param<L>(), d.data(), L::dims::rank));
      }
    };
    (one(std::type_identity<Ls>{}), ...);
    (void)one;
  }(leaves{});
}

struct adamw_scalars {
  std::int64_t step = 0;
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, max_grad_norm = 0;
};

template <class Store>
void optimizer_records(std::vector<record_desc>& out, const adamw<Store>& o, adamw_scalars& sc) {
  using opt = adamw<Store>;
  using A = adamw_access<Store>;
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    auto one = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
      using L = tl::at_t<I, typename opt::trainable>;
      constexpr std::size_t n = [] {
        std::size_t c = 1;
        for (dim_t d : L::dims::dims) c *= static_cast<std::size_t>(d);
        return c;
      }();
      const auto& d = L::dims::dims;
      if constexpr (opt::template has_master<L>)
        out.push_back(desc_of(sf::kind::master, leaf_name<L>(), std::span<float>(A::template master<I>(o), n),
                              d.data(), L::dims::rank));
      out.push_back(desc_of(sf::kind::exp_avg, leaf_name<L>(), std::span<float>(A::template exp_avg<I>(o), n),
                            d.data(), L::dims::rank));
      out.push_back(desc_of(sf::kind::exp_avg_sq, leaf_name<L>(), std::span<float>(A::template exp_avg_sq<I>(o), n),
                            d.data(), L::dims::rank));
    };
    (one(std::integral_constant<std::size_t, K>{}), ...);
  }(std::make_index_sequence<opt::trainable::size>{});
  auto scalar = [&](std::string_view name, auto& v) {
    out.push_back(desc_of(sf::kind::scalar, name, std::span(&v, 1), nullptr, 0));
  };
  scalar("adamw.step", sc.step);
  scalar("adamw.lr", sc.lr);
  scalar("adamw.beta1", sc.beta1);
  scalar("adamw.beta2", sc.beta2);
  scalar("adamw.eps", sc.eps);
  scalar("adamw.weight_decay", sc.weight_decay);
  scalar("adamw.max_grad_norm", sc.max_grad_norm);
}

// Copy n elements of `size` bytes, from/to little-endian.
inline void copy_le(void* dst, const void* src, std::size_t size, std::size_t n) {
  if constexpr (std::endian::native == std::endian::little) {
    if (n) std::memcpy(dst, src, size * n);
  } else {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t b = 0; b < size; ++b) d[i * size + b] = s[i * size + size - 1 - b];
  }
}

inline std::string path_text(const std::filesystem::path& p) { return p.string(); }

// ------------------------------------------------------------- writing ----
class state_writer {
 public:
  state_writer(std::FILE* f, const std::string& path) : f_(f), path_(path) { buf_.reserve(cap); }
  void u8(std::uint8_t v) { bytes(&v, 1); }
  void u32(std::uint32_t v) { le(v, 4); }
  void u64(std::uint64_t v) { le(v, 8); }
  void bytes(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    hash_ = sf::fnv1a64(c, n, hash_);
    written_ += n;
    while (n) {
      const std::size_t k = std::min(n, cap - buf_.size());
      buf_.insert(buf_.end(), c, c + k);
      c += k;
      n -= k;
      if (buf_.size() == cap) flush();
    }
  }
  void elements(const record_desc& r) {
    if constexpr (std::endian::native == std::endian::little) {
      bytes(r.data, r.bytes());
    } else {
      unsigned char tmp[8];
      for (std::size_t i = 0; i < r.count; ++i) {
        copy_le(tmp, r.data + i * r.elem_size, r.elem_size, 1);
        bytes(tmp, r.elem_size);
      }
    }
  }
  std::uint64_t hash() const { return hash_; }
  std::uint64_t written() const { return written_; }
  void flush() {
    if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
      throw error("ctg: cannot write state file '" + path_ + "': " + std::strerror(errno));
    buf_.clear();
  }

 private:
  static constexpr std::size_t cap = std::size_t(1) << 20;
  void le(std::uint64_t v, int n) {
    unsigned char b[8];
    for (int i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(b, static_cast<std::size_t>(n));
  }
  std::FILE* f_;
  const std::string& path_;
  std::vector<unsigned char> buf_;
  std::uint64_t hash_ = 0xcbf29ce484222325ull;
  std::uint64_t written_ = 0;
};

inline void write_state_file(const std::filesystem::path& path, const std::vector<record_desc>& recs) {
  std::uint64_t size = sf::header_bytes + sf::trailer_bytes;
  for (const auto& r : recs) size += 4 + r.name.size() + 4 + 8 * std::uint64_t(r.rank) + 8 + r.bytes();

  std::filesystem::path tmp = path;
  tmp += ".tmp";
  const std::string tmp_text = path_text(tmp);
  std::FILE* f = std::fopen(tmp_text.c_str(), "wb");
  if (!f) throw error("ctg: cannot create state file '" + tmp_text + "': " + std::strerror(errno));
  struct guard {  // on any failure: close and remove the .tmp
    std::FILE*& f;
    const std::filesystem::path& tmp;
    bool done = false;
    ~guard() {
      if (done) return;
      if (f) std::fclose(f);
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
    }
  } g{f, tmp};

  state_writer w(f, tmp_text);
  w.bytes(sf::magic, 8);
  w.u32(sf::version);
  w.u32(0);
  w.u64(size);
  for (const auto& r : recs) {
    w.u32(static_cast<std::uint32_t>(r.name.size()));
    w.bytes(r.name.data(), r.name.size());
    w.u8(static_cast<std::uint8_t>(r.kind));
    w.u8(r.dtype);
    w.u8(r.rank);
    w.u8(0);
    for (std::size_t i = 0; i < r.rank; ++i) w.u64(static_cast<std::uint64_t>(r.dims[i]));
    w.u64(r.bytes());
    w.elements(r);
  }
  w.u64(recs.size());
  w.u64(w.hash());
  w.flush();
  if (w.written() != size) throw error("ctg: internal error writing state file '" + tmp_text + "': size mismatch");
  if (std::fflush(f) != 0) throw error("ctg: cannot write state file '" + tmp_text + "': " + std::strerror(errno));
#ifdef CTG_STATE_FILE_HAVE_FSYNC
  if (::fsync(::fileno(f)) != 0)
    throw error("ctg: cannot write state file '" + tmp_text + "' (fsync): " + std::strerror(errno));
#endif
  std::FILE* closing = f;
  f = nullptr;
  if (std::fclose(closing) != 0)
    throw error("ctg: cannot write state file '" + tmp_text + "' (close): " + std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw error("ctg: cannot rename '" + tmp_text + "' to '" + path_text(path) + "': " + ec.message());
  g.done = true;
}

// ------------------------------------------------------------- reading ----
struct parsed_record {
  std::uint8_t kind, dtype;
  std::string_view name;
  std::vector<std::int64_t> dims;
  const unsigned char* data;
  std::uint64_t bytes;
};

inline std::vector<unsigned char> read_file(const std::filesystem::path& path) {
  const std::string p = path_text(path);
  struct closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  const std::unique_ptr<std::FILE, closer> file(std::fopen(p.c_str(), "rb"));
  if (!file) throw error("ctg: cannot open state file '" + p + "': " + std::strerror(errno));
  std::FILE* f = file.get();
  std::error_code ec;
  const auto expected = std::filesystem::file_size(path, ec);
  std::vector<unsigned char> buf(ec ? std::size_t(1) << 16 : static_cast<std::size_t>(expected) + 1);
  std::size_t used = 0;
  for (;;) {
    if (used == buf.size()) buf.resize(2 * buf.size());
    const std::size_t k = std::fread(buf.data() + used, 1, buf.size() - used, f);
    used += k;
    if (k == 0) break;
  }
  if (std::ferror(f) != 0) throw error("ctg: cannot read state file '" + p + "'");
  buf.resize(used);
  return buf;
}

inline std::uint64_t get_le(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

inline std::string hex64(std::uint64_t v) {
  char b[19];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

inline std::string printable(const unsigned char* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\') {
      s += static_cast<char>(p[i]);
    } else {
      char b[5];
      std::snprintf(b, sizeof b, "\\x%02x", p[i]);
      s += b;
    }
  }
  return s;
}

// Checks the header, size and checksum, then splits the records.
inline std::vector<parsed_record> parse_state_file(const std::vector<unsigned char>& f, const std::string& path) {
  const std::string where = "ctg: state file '" + path + "'";
  const std::size_t n = f.size();
  const std::size_t m = std::min<std::size_t>(n, 8);
  if (n == 0 || std::memcmp(f.data(), sf::magic, m) != 0)
    throw error("ctg: '" + path + "' is not a ctg state file: expected magic \"CTGSTATE\", found \"" +
                printable(f.data(), m) + "\"" + (n == 0 ? " (an empty file)" : ""));
  if (n < sf::header_bytes + sf::trailer_bytes)
    throw error(where + " is truncated: expected at least " + std::to_string(sf::header_bytes + sf::trailer_bytes) +
                " bytes, found " + std::to_string(n));
  const std::uint64_t ver = get_le(f.data() + 8, 4);
  if (ver != sf::version)
    throw error(where + " has format version " + std::to_string(ver) + ", expected " + std::to_string(sf::version));
  const std::uint64_t flags = get_le(f.data() + 12, 4);
  if (flags != 0) throw error(where + " is corrupt: expected flags 0, found " + std::to_string(flags));
  const std::uint64_t size = get_le(f.data() + 16, 8);
  if (size != n)
    throw error(where + (n < size ? " is truncated" : " is corrupt") + ": its header says " + std::to_string(size) +
                " bytes, found " + std::to_string(n));
  const std::uint64_t stored = get_le(f.data() + n - 8, 8);
  const std::uint64_t actual = sf::fnv1a64(f.data(), n - 8);
  if (stored != actual)
    throw error(where + " is corrupt: checksum expected " + hex64(stored) + " (stored), found " + hex64(actual));

  std::vector<parsed_record> out;
  const std::size_t end = n - sf::trailer_bytes;
  std::size_t at = sf::header_bytes;
  auto need = [&](std::uint64_t k, const char* what) {
    if (k > end - at)
      throw error(where + " is corrupt: record " + std::to_string(out.size()) + " (" + what + ") runs past the end");
  };
  while (at < end) {
    parsed_record r{};
    need(4, "name length");
    const std::uint64_t len = get_le(f.data() + at, 4);
    at += 4;
    need(len, "name");
    r.name = std::string_view(reinterpret_cast<const char*>(f.data() + at), len);
    at += len;
    need(4, "kind, dtype, rank");
    r.kind = f[at];
    r.dtype = f[at + 1];
    const std::size_t rank = f[at + 2];
    const std::uint8_t reserved = f[at + 3];
    at += 4;
    const std::string rec = "record " + std::to_string(out.size()) + " ('" + std::string(r.name) + "')";
    if (!kind_name(r.kind))
      throw error(where + " is corrupt: " + rec + " has kind " + std::to_string(r.kind) + ", expected 1..5");
    if (!dtype_name(r.dtype))
      throw error(where + " is corrupt: " + rec + " has dtype code " + std::to_string(r.dtype) + ", expected 1..7");
    if (reserved != 0) throw error(where + " is corrupt: " + rec + " has a non-zero reserved byte");
    need(8 * std::uint64_t(rank), "dims");
    std::uint64_t numel = 1;
    bool overflow = false;
    for (std::size_t i = 0; i < rank; ++i) {
      const auto d = static_cast<std::int64_t>(get_le(f.data() + at, 8));
      at += 8;
      if (d < 0) throw error(where + " is corrupt: " + rec + " has a negative dim " + std::to_string(d));
      r.dims.push_back(d);
      if (d != 0 && numel > ~std::uint64_t(0) / static_cast<std::uint64_t>(d)) overflow = true;
      numel *= static_cast<std::uint64_t>(d);
    }
    need(8, "byte count");
    r.bytes = get_le(f.data() + at, 8);
    at += 8;
    const std::uint64_t es = dtype_size(r.dtype);
    if (overflow || numel > ~std::uint64_t(0) / es || numel * es != r.bytes)
      throw error(where + " is corrupt: " + rec + " has " + std::to_string(r.bytes) + " data bytes, expected " +
                  (overflow ? std::string("(dims overflow)") : std::to_string(numel * es)) + " for " +
                  dtype_name(r.dtype) + " " + dims_text(r.dims.data(), r.dims.size()));
    need(r.bytes, "data");
    r.data = f.data() + at;
    at += r.bytes;
    out.push_back(std::move(r));
  }
  const std::uint64_t count = get_le(f.data() + end, 8);
  if (count != out.size())
    throw error(where + " is corrupt: its trailer says " + std::to_string(count) + " records, found " +
                std::to_string(out.size()));
  return out;
}

// Matches the file's records against the model's, checks everything, then
// (and only then) copies. `only_params`: records of other kinds are ignored.
// `before_commit` runs after the scalars were copied to their (temporary)
// destinations and may throw; nothing else has been written then.
template <class F>
void load_records(const std::filesystem::path& path, std::vector<record_desc>& want, bool only_params,
                  F&& before_commit) {
  const std::string p = path_text(path);
  const std::string where = "ctg: state file '" + p + "': ";
  const std::vector<unsigned char> file = read_file(path);
  const std::vector<parsed_record> recs = parse_state_file(file, p);

  std::map<std::pair<std::uint8_t, std::string_view>, std::size_t> index;
  for (std::size_t i = 0; i < recs.size(); ++i) {
    if (!index.emplace(std::pair(recs[i].kind, recs[i].name), i).second)
      throw error(where + kind_name(recs[i].kind) + " '" + std::string(recs[i].name) + "' occurs twice");
  }
  std::vector<bool> used(recs.size(), false);
  std::vector<const parsed_record*> src(want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    const record_desc& w = want[k];
    const auto it = index.find(std::pair(static_cast<std::uint8_t>(w.kind), w.name));
    if (it == index.end())
      throw error(where + w.what() + ": expected " + dtype_name(w.dtype) + " " + dims_text(w.dims, w.rank) +
                  ", found no such record");
    const parsed_record& r = recs[it->second];
    if (r.dtype != w.dtype)
      throw error(where + w.what() + ": expected dtype " + dtype_name(w.dtype) + ", found " + dtype_name(r.dtype));
    bool same_dims = r.dims.size() == w.rank;
    for (std::size_t i = 0; same_dims && i < w.rank; ++i) same_dims = r.dims[i] == w.dims[i];
    if (!same_dims)
      throw error(where + w.what() + ": expected dims " + dims_text(w.dims, w.rank) + ", found " +
                  dims_text(r.dims.data(), r.dims.size()));
    if (r.bytes != w.bytes())
      throw error(where + w.what() + ": expected " + std::to_string(w.bytes()) + " data bytes, found " +
                  std::to_string(r.bytes));
    used[it->second] = true;
    src[k] = &r;
  }
  for (std::size_t i = 0; i < recs.size(); ++i) {
    const parsed_record& r = recs[i];
    if (used[i] || (only_params && r.kind != static_cast<std::uint8_t>(sf::kind::param))) continue;
    throw error(where + kind_name(r.kind) + " '" + std::string(r.name) + "' (" + dtype_name(r.dtype) + " " +
                dims_text(r.dims.data(), r.dims.size()) + ") is in the file but not in this " +
                (r.kind == static_cast<std::uint8_t>(sf::kind::param) ? "model" : "optimizer") +
                ": expected no such record");
  }
  for (std::size_t k = 0; k < want.size(); ++k)
    if (want[k].kind == sf::kind::scalar) copy_le(want[k].data, src[k]->data, want[k].elem_size, want[k].count);
  before_commit();
  // Nothing below throws.
  for (std::size_t k = 0; k < want.size(); ++k)
    if (want[k].kind != sf::kind::scalar) copy_le(want[k].data, src[k]->data, want[k].elem_size, want[k].count);
}
}  // namespace detail

// Params (trainable and frozen) only.
template <class Store>
void save(const std::filesystem::path& path, Store& store) {
  std::vector<detail::record_desc> recs;
  detail::param_records(recs, store);
  detail::write_state_file(path, recs);
}

// Params and the optimizer's state (masters, moments, step count, configuration).
template <class Store>
void save(const std::filesystem::path& path, Store& store, const adamw<Store>& opt) {
  std::vector<detail::record_desc> recs;
  detail::param_records(recs, store);
  detail::adamw_scalars sc;
  const adamw_config& c = opt.config();
  sc = {opt.steps(), c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, c.max_grad_norm};
  detail::optimizer_records(recs, opt, sc);
  detail::write_state_file(path, recs);
}

// Params only; the file's optimizer records, if any, are ignored.
template <class Store>
void load(const std::filesystem::path& path, Store& store) {
  std::vector<detail::record_desc> recs;
  detail::param_records(recs, store);
  detail::load_records(path, recs, true, [] {});
}

// Params and the optimizer's state, as save(path, store, opt) wrote them.
template <class Store>
void load(const std::filesystem::path& path, Store& store, adamw<Store>& opt) {
  std::vector<detail::record_desc> recs;
  detail::param_records(recs, store);
  detail::adamw_scalars sc;
  detail::optimizer_records(recs, opt, sc);
  adamw_config c;
  detail::load_records(path, recs, false, [&] {
    c = {sc.lr, sc.beta1, sc.beta2, sc.eps, sc.weight_decay, sc.max_grad_norm};
    const std::string where = "ctg: state file '" + detail::path_text(path) + "': ";
    if (sc.step < 0)
      throw error(where + "scalar 'adamw.step': expected a count >= 0, found " + std::to_string(sc.step));
    try {
      c.validate();
    } catch (const error& e) {
      std::string_view what = e.what();
      if (what.starts_with("ctg: ")) what.remove_prefix(5);
      throw error(where + std::string(what));
    }
  });
  detail::adamw_access<Store>::steps(opt) = sc.step;
  detail::adamw_access<Store>::config(opt) = c;
}

}  // namespace ctg::optim

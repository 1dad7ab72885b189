#pragma once
// The oracle's exchange format: a "tensor bundle", one binary file holding
// named tensors. Written by the C++ dump programs, read by tests/oracle/bundle.py
// (which can also write one, read back here: see bundle_tool.cpp).
//
// Layout (every integer little-endian, no padding anywhere):
//   magic    4 bytes  "CTGB"
//   version  u32      1
//   count    u32      number of records
//   count records, each:
//     name_len u32, name (name_len bytes of UTF-8, no terminating NUL)
//     dtype    u32      1 f32, 2 f64, 3 bf16, 4 f16, 5 i32
//     rank     u32      0..8 (0: a scalar, one element)
//     dims     rank x i64
//     data     numel x itemsize bytes, row-major, each element little-endian
//              (bf16 / f16: the 16-bit pattern)
// Names are unique within a bundle.
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <ctg/core/dtypes.hpp>

namespace bundle {

enum class dtype : std::uint32_t { f32 = 1, f64 = 2, bf16 = 3, f16 = 4, i32 = 5 };

inline constexpr std::array<char, 4> magic{'C', 'T', 'G', 'B'};
inline constexpr std::uint32_t version = 1;
inline constexpr std::uint32_t max_rank = 8;

inline std::size_t itemsize(dtype d) {
  switch (d) {
    case dtype::f32: return 4;
    case dtype::f64: return 8;
    case dtype::bf16: return 2;
    case dtype::f16: return 2;
    case dtype::i32: return 4;
  }
  throw std::runtime_error("bundle: unknown dtype code " + std::to_string(static_cast<std::uint32_t>(d)));
}

inline const char* dtype_name(dtype d) {
  switch (d) {
    case dtype::f32: return "f32";
    case dtype::f64: return "f64";
    case dtype::bf16: return "bf16";
    case dtype::f16: return "f16";
    case dtype::i32: return "i32";
  }
  return "?";
}

// The code of a C++ element type.
template <class T>
constexpr dtype code_of() {
  if constexpr (std::is_same_v<T, float>) return dtype::f32;
  else if constexpr (std::is_same_v<T, double>) return dtype::f64;
  else if constexpr (std::is_same_v<T, ctg::bf16>) return dtype::bf16;
  else if constexpr (std::is_same_v<T, ctg::f16>) return dtype::f16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return dtype::i32;
  else static_assert(sizeof(T) == 0, "bundle: no dtype code for this element type");
}

// One named tensor; `data` holds the elements in the file's (little-endian) byte order.
struct tensor {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> dims;
  std::vector<std::byte> data;

  std::size_t numel() const {
    std::size_t n = 1;
    for (auto d : dims) n *= static_cast<std::size_t>(d);
    return n;
  }
  // The elements as T (which must be the tensor's dtype).
  template <class T>
  std::vector<T> as() const;
};

namespace detail {
// Reverse the bytes of each `width`-byte element (used only on big-endian hosts).
inline void swap_elements(std::byte* p, std::size_t n, std::size_t width) {
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t a = 0, b = width - 1; a < b; ++a, --b) std::swap(p[i * width + a], p[i * width + b]);
}
inline void to_little(std::byte* p, std::size_t n, std::size_t width) {
  if constexpr (std::endian::native == std::endian::big) swap_elements(p, n, width);
}
template <class U>
void put_int(std::vector<std::byte>& out, U v) {
  static_assert(std::is_integral_v<U>);
  using UU = std::make_unsigned_t<U>;
  const UU u = static_cast<UU>(v);
  for (std::size_t i = 0; i < sizeof(U); ++i) out.push_back(static_cast<std::byte>((u >> (8 * i)) & 0xFF));
}

class cursor {
 public:
  cursor(const std::vector<std::byte>& b, const std::string& path) : b_(b), path_(path) {}
  const std::byte* take(std::size_t n) {
    if (n > b_.size() - pos_) throw std::runtime_error("bundle: " + path_ + ": truncated file");
    const std::byte* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <class U>
  U get_int() {
    const std::byte* p = take(sizeof(U));
    std::make_unsigned_t<U> u = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i)
      u |= static_cast<std::make_unsigned_t<U>>(std::to_integer<unsigned>(p[i])) << (8 * i);
    return static_cast<U>(u);
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  const std::vector<std::byte>& b_;
  std::string path_;
  std::size_t pos_ = 0;
};
}  // namespace detail

template <class T>
std::vector<T> tensor::as() const {
  if (code_of<T>() != type)
    throw std::runtime_error("bundle: tensor '" + name + "' is " + dtype_name(type) + ", asked for " +
                             dtype_name(code_of<T>()));
  std::vector<T> r(numel());
  std::vector<std::byte> bytes = data;
  detail::to_little(bytes.data(), r.size(), sizeof(T));  // little -> native is the same swap
  if (!bytes.empty()) std::memcpy(r.data(), bytes.data(), bytes.size());  // (an empty vector's data() may be null)
  return r;
}

// Collects tensors, then writes them in the order they were added.
class writer {
 public:
  template <class T>
  void add(const std::string& name, std::span<const T> values, std::vector<std::int64_t> dims) {
    tensor t;
    t.name = name;
    t.type = code_of<T>();
    t.dims = std::move(dims);
    if (t.numel() != values.size())
      throw std::runtime_error("bundle: tensor '" + name + "' has " + std::to_string(values.size()) +
                               " elements but its dims hold " + std::to_string(t.numel()));
    t.data.resize(values.size() * sizeof(T));
    if (!t.data.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
    detail::to_little(t.data.data(), values.size(), sizeof(T));
    add(std::move(t));
  }
  // A tensor whose data is already in the file's byte order.
  void add(tensor t) {
    if (t.dims.size() > max_rank) throw std::runtime_error("bundle: tensor '" + t.name + "' has rank > 8");
    if (t.data.size() != t.numel() * itemsize(t.type))
      throw std::runtime_error("bundle: tensor '" + t.name + "': data size does not match dims and dtype");
    for (const auto& o : tensors_)
      if (o.name == t.name) throw std::runtime_error("bundle: two tensors named '" + t.name + "'");
    tensors_.push_back(std::move(t));
  }
  const std::vector<tensor>& tensors() const { return tensors_; }

  void save(const std::string& path) const {
    std::vector<std::byte> out;
    for (char c : magic) out.push_back(static_cast<std::byte>(c));
    detail::put_int<std::uint32_t>(out, version);
    detail::put_int<std::uint32_t>(out, static_cast<std::uint32_t>(tensors_.size()));
    for (const auto& t : tensors_) {
      detail::put_int<std::uint32_t>(out, static_cast<std::uint32_t>(t.name.size()));
      for (char c : t.name) out.push_back(static_cast<std::byte>(c));
      detail::put_int<std::uint32_t>(out, static_cast<std::uint32_t>(t.type));
      detail::put_int<std::uint32_t>(out, static_cast<std::uint32_t>(t.dims.size()));
      for (auto d : t.dims) detail::put_int<std::int64_t>(out, d);
      out.insert(out.end(), t.data.begin(), t.data.end());
    }
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    f.close();
    if (!f) throw std::runtime_error("bundle: cannot write " + path);
  }

 private:
  std::vector<tensor> tensors_;
};

// Reads a whole bundle; throws std::runtime_error on any malformed input.
inline std::vector<tensor> read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("bundle: cannot open " + path);
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(raw.size());
  if (!raw.empty()) std::memcpy(b.data(), raw.data(), raw.size());
  detail::cursor c(b, path);
  const std::byte* m = c.take(4);
  for (std::size_t i = 0; i < 4; ++i)
    if (static_cast<char>(m[i]) != magic[i]) throw std::runtime_error("bundle: " + path + ": not a tensor bundle");
  const auto v = c.get_int<std::uint32_t>();
  if (v != version) throw std::runtime_error("bundle: " + path + ": unsupported version " + std::to_string(v));
  const auto count = c.get_int<std::uint32_t>();
  std::vector<tensor> out;
  for (std::uint32_t k = 0; k < count; ++k) {
    tensor t;
    const auto len = c.get_int<std::uint32_t>();
    const std::byte* p = c.take(len);
    t.name.assign(reinterpret_cast<const char*>(p), len);
    t.type = static_cast<dtype>(c.get_int<std::uint32_t>());
    const std::size_t width = itemsize(t.type);
    const auto rank = c.get_int<std::uint32_t>();
    if (rank > max_rank) throw std::runtime_error("bundle: " + path + ": tensor '" + t.name + "' has rank > 8");
    std::size_t numel = 1;
    bool too_big = false;
    for (std::uint32_t d = 0; d < rank; ++d) {
      const auto n = c.get_int<std::int64_t>();
      if (n < 0) throw std::runtime_error("bundle: " + path + ": tensor '" + t.name + "' has a negative dim");
      t.dims.push_back(n);
      const auto un = static_cast<std::size_t>(n);
      too_big = too_big || (un != 0 && numel > b.size() / un);
      numel *= un;
    }
    if (numel == 0) too_big = false;
    if (too_big || numel > b.size() / width)
      throw std::runtime_error("bundle: " + path + ": tensor '" + t.name + "' is larger than the file");
    const std::byte* data = c.take(numel * width);
    t.data.assign(data, data + numel * width);
    out.push_back(std::move(t));
  }
  if (!c.done()) throw std::runtime_error("bundle: " + path + ": trailing bytes after the last record");
  return out;
}

}  // namespace bundle

#pragma once
// The safetensors file format (Hugging Face), read and written strictly. No
// store, no model: named tensors of bytes. io/safetensors.hpp puts a store's
// leaves through it.
//
//   auto f = ctg::io::safetensors_file::read("model.safetensors");   // checks all of it
//   const ctg::io::safetensors_tensor* t = f.find("lm_head.weight");  // dtype, shape, bytes
//   f.metadata();                                                     // the "__metadata__" pairs
//   ctg::io::write_safetensors("out.safetensors", tensors, metadata);  // atomic (a temporary file, rename)
//
// Format: an 8-byte little-endian u64 N, then N bytes of JSON (an object:
// tensor name -> {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
// offsets relative to the first byte after the header; optionally
// "__metadata__": an object of string -> string), then the data: row-major,
// little-endian. The writer pads the JSON with spaces to a multiple of 8 so
// the data is 8-byte aligned, as the reference writer does.
//
// read() accepts exactly that and throws ctg::error ("ctg: safetensors file
// '<path>': ...", naming the tensor and the expected vs found value) for: a
// file shorter than its header length says; a header that is not that JSON
// (syntax, a duplicate key, a missing or unknown field, a wrong value type, an
// unknown dtype, a negative or fractional number); a tensor whose byte count
// is not its shape's; offsets past the end of the data, overlapping, leaving a
// gap, or not covering the data to its last byte. Every dtype of the format is
// known (BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64);
// ctg's leaves use F32 F64 BF16 F16 F8_E4M3 F8_E5M2, index inputs I32. A shape
// of rank > 6 (ctg's max_rank) is rejected.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <unordered_set>
#include <vector>

#include <ctg/core/dtypes.hpp>
#include <ctg/core/error.hpp>
#include <ctg/io/file.hpp>
#include <ctg/exec/runtime_shapes.hpp>

namespace ctg::io {

// The format's dtypes, with their names in the header and element sizes.
enum class st_dtype : std::uint8_t { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

}  // namespace ctg::io

namespace ctg::detail {
using io::st_dtype;
struct st_dtype_row {
  st_dtype code;
  std::string_view name;
  std::size_t size;
};
inline constexpr st_dtype_row st_dtypes[] = {
    {st_dtype::BOOL, "BOOL", 1},       {st_dtype::U8, "U8", 1},     {st_dtype::I8, "I8", 1},
    {st_dtype::F8_E5M2, "F8_E5M2", 1}, {st_dtype::F8_E4M3, "F8_E4M3", 1}, {st_dtype::I16, "I16", 2},
    {st_dtype::U16, "U16", 2},         {st_dtype::F16, "F16", 2},   {st_dtype::BF16, "BF16", 2},
    {st_dtype::I32, "I32", 4},         {st_dtype::U32, "U32", 4},   {st_dtype::F32, "F32", 4},
    {st_dtype::F64, "F64", 8},         {st_dtype::I64, "I64", 8},   {st_dtype::U64, "U64", 8}};
}  // namespace ctg::detail

namespace ctg::io {

constexpr std::string_view name_of(st_dtype d) { return detail::st_dtypes[static_cast<std::size_t>(d)].name; }
constexpr std::size_t size_of(st_dtype d) { return detail::st_dtypes[static_cast<std::size_t>(d)].size; }

// The safetensors dtype of a ctg element type (or of an i32 index tensor).
template <class T>
inline constexpr st_dtype st_dtype_of = [] {
  if constexpr (std::is_same_v<T, f32>) return st_dtype::F32;
  else if constexpr (std::is_same_v<T, f64>) return st_dtype::F64;
  else if constexpr (std::is_same_v<T, bf16>) return st_dtype::BF16;
  else if constexpr (std::is_same_v<T, f16>) return st_dtype::F16;
  else if constexpr (std::is_same_v<T, e4m3>) return st_dtype::F8_E4M3;
  else if constexpr (std::is_same_v<T, e5m2>) return st_dtype::F8_E5M2;
  else {
    static_assert(std::is_same_v<T, i32>, "ctg: no safetensors dtype for this element type");
    return st_dtype::I32;
  }
}();

// One tensor of a file: its bytes are little-endian, row-major, in the file's buffer.
struct safetensors_tensor {
  std::string name;
  st_dtype dtype;
  rt_shape shape;
  std::span<const std::byte> data;
};

// One tensor to write.
struct safetensors_out {
  std::string name;
  st_dtype dtype;
  rt_shape shape;
  std::span<const std::byte> data;  // little-endian, row-major; size = numel * size_of(dtype)
};

using safetensors_metadata = std::vector<std::pair<std::string, std::string>>;

}  // namespace ctg::io

namespace ctg::detail {
using io::st_dtype;
using io::safetensors_tensor;
using io::safetensors_metadata;
using io::name_of;
using io::size_of;

// A JSON reader for the header's subset: objects, arrays, strings, non-negative integers.
class st_json {
 public:
  st_json(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  [[noreturn]] void fail(const std::string& expected) const {
    std::string found = at_end() ? "the end of the header" : "'" + std::string(1, s_[i_]) + "'";
    if (!at_end() && (static_cast<unsigned char>(s_[i_]) < 0x20 || static_cast<unsigned char>(s_[i_]) >= 0x7f))
      found = "byte " + std::to_string(static_cast<unsigned char>(s_[i_]));
    throw error(where_ + "malformed header at byte " + std::to_string(i_) + ": expected " + expected + ", found " +
                found);
  }
  bool at_end() const { return i_ >= s_.size(); }
  void ws() {
    while (!at_end() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool peek(char c) {
    ws();
    return !at_end() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("'") + c + "'");
    ++i_;
  }
  // Calls item() for each element of an array or each key of an object (key passed).
  template <class F>
  void object(F&& item) {
    expect('{');
    if (peek('}')) {
      ++i_;
      return;
    }
    for (;;) {
      std::string key = string();
      expect(':');
      item(key);
      if (peek(',')) {
        ++i_;
        continue;
      }
      expect('}');
      return;
    }
  }
  template <class F>
  void array(F&& item) {
    expect('[');
    if (peek(']')) {
      ++i_;
      return;
    }
    for (;;) {
      item();
      if (peek(',')) {
        ++i_;
        continue;
      }
      expect(']');
      return;
    }
  }
  std::uint64_t integer() {
    ws();
    if (at_end() || s_[i_] < '0' || s_[i_] > '9') fail("a non-negative integer");
    if (s_[i_] == '0' && i_ + 1 < s_.size() && s_[i_ + 1] >= '0' && s_[i_ + 1] <= '9') fail("no leading zero");
    std::uint64_t v = 0;
    while (!at_end() && s_[i_] >= '0' && s_[i_] <= '9') {
      const std::uint64_t d = static_cast<std::uint64_t>(s_[i_] - '0');
      if (v > (~std::uint64_t(0) - d) / 10) fail("an integer below 2^64");
      v = v * 10 + d;
      ++i_;
    }
    if (!at_end() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) fail("an integer");
    return v;
  }
  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_end()) fail("'\"' (an unterminated string)");
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("no control character in a string");
      if (c != '\\') {
        out += c;
        ++i_;
        continue;
      }
      ++i_;
      if (at_end()) fail("an escape");
      switch (s_[i_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': utf8(out, code_point()); break;
        default: --i_; fail("an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
      }
    }
  }

 private:
  unsigned hex4() {
    unsigned v = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
      if (at_end()) fail("4 hex digits");
      const char c = s_[i_];
      const unsigned d = c >= '0' && c <= '9' ? unsigned(c - '0')
                         : c >= 'a' && c <= 'f' ? unsigned(c - 'a' + 10)
                         : c >= 'A' && c <= 'F' ? unsigned(c - 'A' + 10)
                                                : 16u;
      if (d == 16) fail("4 hex digits");
      v = v * 16 + d;
    }
    return v;
  }
  std::uint32_t code_point() {
    const unsigned hi = hex4();
    if (hi >= 0xDC00 && hi <= 0xDFFF) fail("a high surrogate before a low one");
    if (hi < 0xD800 || hi > 0xDBFF) return hi;
    if (i_ + 1 >= s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') fail("a low surrogate (\\uDC00..\\uDFFF)");
    i_ += 2;
    const unsigned lo = hex4();
    if (lo < 0xDC00 || lo > 0xDFFF) fail("a low surrogate (\\uDC00..\\uDFFF)");
    return 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
  }
  static void utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string_view s_;
  const std::string& where_;
  std::size_t i_ = 0;
};

inline void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[7];
      std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += b;
    } else {
      out += c;
    }
  }
  out += '"';
}

inline std::uint64_t le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

inline std::string tensor_text(const safetensors_tensor& t) {
  return "'" + t.name + "' (" + std::string(name_of(t.dtype)) + " " + ctg::detail::dims_text(t.shape) + ")";
}

// Parses and checks the header; fills tensors (data spans into `data`) and metadata.
inline void parse_safetensors(std::span<const std::byte> file, const std::string& where,
                              std::vector<safetensors_tensor>& tensors, safetensors_metadata& metadata) {
  if (file.size() < 8)
    throw error(where + "truncated: expected at least 8 bytes (the header length), found " +
                std::to_string(file.size()));
  const std::uint64_t n = le64(file.data());
  if (n > file.size() - 8)
    throw error(where + "truncated: the header length says " + std::to_string(n) + " bytes, found " +
                std::to_string(file.size() - 8) + " after it");
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), n);
  const std::span<const std::byte> data = file.subspan(8 + n);
  st_json j(text, where);
  if (text.empty() || text[0] != '{') j.fail("'{' as the header's first byte");

  std::vector<std::pair<std::uint64_t, std::uint64_t>> offsets;
  bool have_metadata = false;
  // (Sets: a scan of the names so far made a header of n tensors take n^2 / 2 compares.)
  std::unordered_set<std::string> tensor_names, metadata_keys;
  j.object([&](const std::string& key) {
    if (key == "__metadata__") {
      if (have_metadata) throw error(where + "malformed header: \"__metadata__\" occurs twice");
      have_metadata = true;
      j.object([&](const std::string& k) {
        if (!metadata_keys.insert(k).second)
          throw error(where + "malformed header: metadata key '" + k + "' occurs twice");
        metadata.emplace_back(k, j.string());
      });
      return;
    }
    if (!tensor_names.insert(key).second) throw error(where + "malformed header: tensor '" + key + "' occurs twice");
    safetensors_tensor t{key, st_dtype::U8, {}, {}};
    bool seen[3] = {false, false, false};
    std::uint64_t off[2] = {0, 0};
    j.object([&](const std::string& field) {
      const int f = field == "dtype" ? 0 : field == "shape" ? 1 : field == "data_offsets" ? 2 : -1;
      if (f < 0)
        throw error(where + "malformed header: tensor '" + key + "': expected the fields dtype, shape, data_offsets, found '" +
                    field + "'");
      if (seen[f]) throw error(where + "malformed header: tensor '" + key + "': field '" + field + "' occurs twice");
      seen[f] = true;
      if (f == 0) {
        const std::string d = j.string();
        const auto* row = std::find_if(std::begin(st_dtypes), std::end(st_dtypes),
                                       [&](const st_dtype_row& r) { return r.name == d; });
        if (row == std::end(st_dtypes))
          throw error(where + "malformed header: tensor '" + key +
                      "': expected a dtype (BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64), found '" +
                      d + "'");
        t.dtype = row->code;
      } else if (f == 1) {
        j.array([&] {
          const std::uint64_t d = j.integer();
          if (t.shape.rank == max_rank)
            throw error(where + "tensor '" + key + "': expected at most " + std::to_string(max_rank) +
                        " dims (ctg's max_rank), found more");
          if (d > static_cast<std::uint64_t>(INT64_MAX)) j.fail("a dim below 2^63");
          t.shape.d[t.shape.rank++] = static_cast<dim_t>(d);
        });
      } else {
        int k = 0;
        j.array([&] {
          if (k == 2) j.fail("']' (data_offsets has two entries)");
          off[k++] = j.integer();
        });
        if (k != 2) throw error(where + "malformed header: tensor '" + key + "': expected data_offsets [begin, end], found " +
                                std::to_string(k) + " entries");
      }
    });
    for (int f = 0; f < 3; ++f)
      if (!seen[f])
        throw error(where + "malformed header: tensor '" + key + "': expected the field '" +
                    (f == 0 ? "dtype" : f == 1 ? "shape" : "data_offsets") + "', found none");
    if (off[0] > off[1])
      throw error(where + "tensor '" + key + "': data_offsets [" + std::to_string(off[0]) + ", " +
                  std::to_string(off[1]) + ") end before they begin");
    // The element count (no 0 dim hides an overflow of the others:
    // detail::numel_fits), then the bytes, each checked.
    dim_t numel = 0;
    if (!ctg::detail::numel_fits(t.shape, numel))
      throw error(where + "tensor " + tensor_text(t) + ": its dims hold more than 2^63 elements");
    std::uint64_t bytes = 0;
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(numel), std::uint64_t{size_of(t.dtype)}, &bytes))
      throw error(where + "tensor " + tensor_text(t) + ": its data would take more than 2^64 bytes");
    if (off[1] - off[0] != bytes)
      throw error(where + "tensor " + tensor_text(t) + ": expected " + std::to_string(bytes) +
                  " data bytes, found data_offsets [" + std::to_string(off[0]) + ", " + std::to_string(off[1]) + ") (" +
                  std::to_string(off[1] - off[0]) + " bytes)");
    if (off[1] > data.size())
      throw error(where + "truncated or out of range: tensor " + tensor_text(t) + " has data_offsets [" +
                  std::to_string(off[0]) + ", " + std::to_string(off[1]) + "), expected an end <= " +
                  std::to_string(data.size()) + " (the data bytes after the header)");
    t.data = data.subspan(off[0], off[1] - off[0]);
    tensors.push_back(std::move(t));
    offsets.emplace_back(off[0], off[1]);
  });
  j.ws();
  if (!j.at_end()) j.fail("only spaces after the header's object");

  // The tensors must tile the data exactly: no overlap, no gap, nothing after the last.
  std::vector<std::size_t> order(tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return offsets[a] < offsets[b]; });
  std::uint64_t at = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const auto [b, e] = offsets[order[k]];
    const auto range = [&] { return " [" + std::to_string(b) + ", " + std::to_string(e) + ")"; };
    if (b < at)
      throw error(where + "tensor '" + tensors[order[k]].name + "' data_offsets" + range() + " overlap tensor '" +
                  tensors[order[k - 1]].name + "' (ends at " + std::to_string(at) + ")");
    if (b > at)
      throw error(where + "tensor '" + tensors[order[k]].name + "' data_offsets" + range() +
                  ": expected to begin at " + std::to_string(at) + " (no gap between tensors)");
    at = e;
  }
  if (at != data.size())
    throw error(where + "expected " + std::to_string(at) + " data bytes (the tensors' offsets), found " +
                std::to_string(data.size()) + " after the header");
}

}  // namespace ctg::detail

namespace ctg::io {

// A safetensors file read into memory and checked (see the top of this header).
class safetensors_file {
 public:
  static safetensors_file read(const std::filesystem::path& path) {
    safetensors_file f;
    f.where_ = "ctg: safetensors file '" + path.string() + "': ";
    f.bytes_ = ctg::detail::read_whole_file(path, "safetensors file");
    detail::parse_safetensors(f.bytes_, f.where_, f.tensors_, f.metadata_);
    return f;
  }
  safetensors_file(safetensors_file&&) = default;  // the tensors' spans point into bytes_, which moves with them
  safetensors_file& operator=(safetensors_file&&) = default;

  const std::vector<safetensors_tensor>& tensors() const { return tensors_; }
  const safetensors_tensor* find(std::string_view name) const {
    for (const auto& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }
  const safetensors_metadata& metadata() const { return metadata_; }
  // "ctg: safetensors file '<path>': ", the start of every message about this file.
  const std::string& where() const { return where_; }

 private:
  safetensors_file() = default;
  std::vector<std::byte> bytes_;
  std::vector<safetensors_tensor> tensors_;
  safetensors_metadata metadata_;
  std::string where_;
};

// Writes a temporary file beside `path`, then renames it over `path`. Tensors are written in the given order.
inline void write_safetensors(const std::filesystem::path& path, std::span<const safetensors_out> tensors,
                              const safetensors_metadata& metadata = {}) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (std::size_t i = 0; i < metadata.size(); ++i) {
      if (i) h += ',';
      detail::json_string(h, metadata[i].first);
      h += ':';
      detail::json_string(h, metadata[i].second);
    }
    h += '}';
  }
  std::uint64_t at = 0;
  for (const auto& t : tensors) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.shape.numel()) * size_of(t.dtype);
    if (bytes != t.data.size())
      throw error("ctg: safetensors tensor '" + t.name + "': expected " + std::to_string(bytes) + " data bytes for " +
                  std::string(name_of(t.dtype)) + " " + ctg::detail::dims_text(t.shape) + ", found " +
                  std::to_string(t.data.size()));
    if (h.size() > 1) h += ',';
    detail::json_string(h, t.name);
    h += ":{\"dtype\":\"" + std::string(name_of(t.dtype)) + "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.rank; ++i) {
      if (i) h += ',';
      h += std::to_string(t.shape.d[i]);
    }
    h += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + bytes) + "]}";
    at += bytes;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');

  ctg::detail::write_atomically(path, "safetensors file", [&](std::FILE* f, const std::string& where) {
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(std::uint64_t(h.size()) >> (8 * i));
    bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
    for (const auto& t : tensors)
      ok = ok && (t.data.empty() || std::fwrite(t.data.data(), 1, t.data.size(), f) == t.data.size());
    if (!ok) throw error("ctg: cannot write safetensors file '" + where + "': " + std::strerror(errno));
  });
}

}  // namespace ctg::io

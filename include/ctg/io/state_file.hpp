#pragma once
// The ctg state file: its byte format, and writing and reading it. No model
// types here: a file is a list of named records of plain data. What goes into
// one (a store's parameters, an optimizer's state) is ctg/io/checkpoint.hpp's
// business; users call ctg::io::save / load from there.
//
//   using namespace ctg::detail;
//   state_file::write(path, records);     // atomic: path holds the old or the whole new file
//   const std::vector<std::byte> bytes = state_file::read(path);
//   state_file::contents c = state_file::parse(bytes, path.string());   // ctg::error unless well-formed
//
// write writes a temporary file beside `path` (and fsyncs it where POSIX is available), then
// renames it over `path` with std::filesystem::rename, so `path` holds either
// the old file or the complete new one (the directory itself is not fsynced).
// I/O failures throw ctg::error naming the path; the temporary file is removed.
// parse checks the header, the size, the checksum and every record's framing
// and codes; it throws ctg::error naming the file, the record, the expected
// and the found value.
//
// ---------------------------------------------------------------- format ----
// Version 3. Integers are little-endian; i64 is two's complement; element
// data is little-endian IEEE (bf16/f16/fp8: their bit patterns), row-major.
//
//   header, 24 bytes
//     [0, 8)    magic: the ASCII bytes "CTGSTATE" (no terminator)
//     [8, 12)   u32 version = 3 (a file with no record newer than version 2
//               is written as version 2, which older readers read)
//     [12, 16)  u32 flags = 0 (reserved; a reader rejects others)
//     [16, 24)  u64 file size in bytes, header and trailer included
//   records, back to back from offset 24, each:
//     u32       name length n in bytes
//     n bytes   name: the leaf's name exactly (any bytes, e.g. "layers.{i}.attn.wq"),
//               or the scalar's name; no terminator
//     u8        kind: 1 param      a stored leaf's value (trainable, frozen or FP8 state), in its dtype
//                     2 master     f32 master copy of a trainable non-f32 leaf
//                     3 exp_avg    f32 first moment of a trainable leaf
//                     4 exp_avg_sq f32 second moment of a trainable leaf
//                     5 scalar     an optimizer scalar, rank 0:
//                                    "adamw.step" i64; "adamw.lr", "adamw.beta1", "adamw.beta2",
//                                    "adamw.eps", "adamw.weight_decay", "adamw.max_grad_norm" f32;
//                                    "adamw.decay" i64 (since version 3: 0 every leaf, 1
//                                    matrices; optim::decay_leaves)
//                     6 store      a store scalar, rank 0, u64 (since version 2):
//                                    "seed" the dropout seed, "steps_run" the count of
//                                    successful steps; the two key every dropout mask
//     u8        dtype: 1 f32, 2 f64, 3 bf16, 4 f16, 5 e4m3, 6 e5m2, 7 i64, 8 u64 (since version 2)
//     u8        rank r (at most 6)
//     u8        reserved = 0
//     r x i64   dims
//     u64       byte count b = product(dims) * element size (1 for rank 0)
//     b bytes   data
//   A (kind, name) pair occurs at most once. save writes the params in the
//   step's topological leaf order, then the store records, then per
//   trainable leaf (Step::wrt order) master (if any), exp_avg, exp_avg_sq,
//   then the scalars; readers must not depend on the order.
//   trailer, 16 bytes
//     u64       record count
//     u64       checksum: FNV-1a 64 (offset basis 0xcbf29ce484222325, prime
//               0x100000001b3, one byte at a time) of every byte before it,
//               i.e. header, records and record count.
//
// Version 1 files (written before the store records existed) are read too:
// the same layout without kind 6 and dtype 8, which are corrupt there. Loading
// one restores everything it holds and leaves the store's seed and steps_run
// as they are. Version 2 files are version 3 without the "adamw.decay"
// scalar: loading one sets the optimizer's decay to every leaf, as it was in
// every run that wrote one.
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
#include <vector>

#include <ctg/core/dims_text.hpp>
#include <ctg/core/error.hpp>
#include <ctg/core/hash.hpp>
#include <ctg/core/shape.hpp>
#include <ctg/io/file.hpp>

namespace ctg::detail::state_file {

inline constexpr char magic[8] = {'C', 'T', 'G', 'S', 'T', 'A', 'T', 'E'};
inline constexpr std::uint32_t version = 3;         // written
inline constexpr std::uint32_t oldest_version = 1;  // still read
inline constexpr std::size_t header_bytes = 24;
inline constexpr std::size_t trailer_bytes = 16;

// ---------------------------------------------------------------- codes ----
// Codes are 1, 2, ... in table order; `since` is the first format version that has the code.
struct dtype_row {
  std::uint8_t code;
  std::string_view name;
  std::uint8_t size;  // bytes per element
  std::uint32_t since;
};
inline constexpr dtype_row dtypes[] = {
    {1, "f32", 4, 1},  {2, "f64", 8, 1},  {3, "bf16", 2, 1}, {4, "f16", 2, 1},
    {5, "e4m3", 1, 1}, {6, "e5m2", 1, 1}, {7, "i64", 8, 1},  {8, "u64", 8, 2},
};

// Who holds a record's value: it names what a file record has no match in.
enum class holder : std::uint8_t { model, store, optimizer };
inline constexpr std::string_view holder_names[] = {"model", "store", "optimizer"};

struct kind_row {
  std::uint8_t code;
  std::string_view name;
  holder held_by;
  std::uint32_t since;
};
inline constexpr kind_row kinds[] = {
    {1, "param", holder::model, 1},          {2, "master", holder::optimizer, 1},
    {3, "exp_avg", holder::optimizer, 1},    {4, "exp_avg_sq", holder::optimizer, 1},
    {5, "scalar", holder::optimizer, 1},     {6, "store", holder::store, 2},
};

// The row of a code in a file of version `ver`; nullptr when the code is unknown there.
template <class Row, std::size_t N>
constexpr const Row* row_of(const Row (&table)[N], std::uint8_t code, std::uint32_t ver = version) {
  for (const Row& r : table)
    if (r.code == code && r.since <= ver) return &r;
  return nullptr;
}
// The code of a name; 0 when there is none.
template <class Row, std::size_t N>
constexpr std::uint8_t code_of(const Row (&table)[N], std::string_view name) {
  for (const Row& r : table)
    if (r.name == name) return r.code;
  return 0;
}
// The highest code a file of version `ver` may use (codes start at 1).
template <class Row, std::size_t N>
constexpr std::uint8_t last_code(const Row (&table)[N], std::uint32_t ver) {
  std::uint8_t last = 0;
  for (const Row& r : table)
    if (r.since <= ver) last = std::max(last, r.code);
  return last;
}

inline std::string_view kind_name(std::uint8_t code) { return row_of(kinds, code)->name; }
inline holder holder_of(std::uint8_t kind) { return row_of(kinds, kind)->held_by; }
inline std::string_view dtype_name(std::uint8_t code) { return row_of(dtypes, code)->name; }
inline std::size_t dtype_size(std::uint8_t code) { return row_of(dtypes, code)->size; }

// -------------------------------------------------------------- records ----
// One record. To write: `data` points at the values in native byte order.
// Parsed: `data` points into the file's bytes (little-endian).
struct record {
  std::uint8_t kind = 0, dtype = 0, rank = 0;
  std::string_view name;
  dim_t dims[max_rank]{};
  std::uint64_t bytes = 0;
  const std::byte* data = nullptr;

  std::span<const dim_t> shape() const { return {dims, rank}; }
  std::uint64_t elements() const { return bytes / dtype_size(dtype); }
  // "param 'mlp.w1'"
  std::string what() const { return std::string(kind_name(kind)) + " '" + std::string(name) + "'"; }
  // "f32 [3, 4]"
  std::string type_text() const { return std::string(dtype_name(dtype)) + " " + dims_text(shape()); }
};

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

// A parsed record's values into `dst`, in native byte order.
inline void copy_values(std::byte* dst, const record& r) { copy_le(dst, r.data, dtype_size(r.dtype), r.elements()); }

// --------------------------------------------------------------- encode ----
// Buffered, hashing, little-endian output to an open FILE.
class file_sink {
 public:
  file_sink(std::FILE* f, const std::string& path) : f_(f), path_(path) { buf_.reserve(cap); }
  void u8(std::uint8_t v) { bytes(&v, 1); }
  void u32(std::uint32_t v) { le(v, 4); }
  void u64(std::uint64_t v) { le(v, 8); }
  void bytes(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    hash_ = fnv1a64(c, n, hash_);
    written_ += n;
    while (n) {
      const std::size_t k = std::min(n, cap - buf_.size());
      buf_.insert(buf_.end(), c, c + k);
      c += k;
      n -= k;
      if (buf_.size() == cap) flush();
    }
  }
  // A record's values, little-endian.
  void values(const record& r) {
    if constexpr (std::endian::native == std::endian::little) {
      bytes(r.data, r.bytes);
    } else {
      const std::size_t size = dtype_size(r.dtype);
      unsigned char tmp[8];
      for (std::uint64_t i = 0; i < r.elements(); ++i) {
        copy_le(tmp, r.data + i * size, size, 1);
        bytes(tmp, size);
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
  std::uint64_t hash_ = fnv1a64_basis;
  std::uint64_t written_ = 0;
};

inline std::uint64_t encoded_size(std::span<const record> recs) {
  std::uint64_t size = header_bytes + trailer_bytes;
  for (const record& r : recs) size += 4 + r.name.size() + 4 + 8 * std::uint64_t(r.rank) + 8 + r.bytes;
  return size;
}

// The whole file: header, records, trailer; `ver` the format version the
// records need (a reader of an older version reads the file if they fit it).
inline void encode(std::span<const record> recs, std::uint32_t ver, file_sink& out) {
  out.bytes(magic, 8);
  out.u32(ver);
  out.u32(0);
  out.u64(encoded_size(recs));
  for (const record& r : recs) {
    out.u32(static_cast<std::uint32_t>(r.name.size()));
    out.bytes(r.name.data(), r.name.size());
    out.u8(r.kind);
    out.u8(r.dtype);
    out.u8(r.rank);
    out.u8(0);
    for (const dim_t d : r.shape()) out.u64(static_cast<std::uint64_t>(d));
    out.u64(r.bytes);
    out.values(r);
  }
  out.u64(recs.size());
  out.u64(out.hash());
}

// ---------------------------------------------------------------- write ----
inline void write(const std::filesystem::path& path, std::span<const record> recs, std::uint32_t ver = version) {
  if (ver < oldest_version || ver > version)
    throw error("ctg: internal error writing state file '" + path.string() + "': version " + std::to_string(ver));
  write_atomically(path, "state file", [&](std::FILE* f, const std::string& where) {
    file_sink out(f, where);
    encode(recs, ver, out);
    out.flush();
    if (out.written() != encoded_size(recs))
      throw error("ctg: internal error writing state file '" + where + "': size mismatch");
  });
}

// ----------------------------------------------------------------- read ----
// The whole file's bytes.
inline std::vector<std::byte> read(const std::filesystem::path& path) { return read_whole_file(path, "state file"); }

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

// Bytes as text: printable ASCII as is, anything else as \xNN.
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

// A well-formed file's version and records (pointing into the file's bytes).
struct contents {
  std::uint32_t version = 0;
  std::vector<record> records;
};

// Checks the header, size and checksum, then splits and checks the records.
// `file` must outlive the result.
inline contents parse(const std::vector<std::byte>& file, const std::string& path) {
  const std::string where = "ctg: state file '" + path + "'";
  const unsigned char* f = reinterpret_cast<const unsigned char*>(file.data());
  const std::size_t n = file.size();
  const std::size_t m = std::min<std::size_t>(n, 8);
  if (n == 0 || std::memcmp(f, magic, m) != 0)
    throw error("ctg: '" + path + "' is not a ctg state file: expected magic \"CTGSTATE\", found \"" +
                printable(f, m) + "\"" + (n == 0 ? " (an empty file)" : ""));
  if (n < header_bytes + trailer_bytes)
    throw error(where + " is truncated: expected at least " + std::to_string(header_bytes + trailer_bytes) +
                " bytes, found " + std::to_string(n));
  const std::uint64_t ver = get_le(f + 8, 4);
  if (ver < oldest_version || ver > version)
    throw error(where + " has format version " + std::to_string(ver) + ", expected " +
                std::to_string(oldest_version) + " to " + std::to_string(version));
  const std::uint64_t flags = get_le(f + 12, 4);
  if (flags != 0) throw error(where + " is corrupt: expected flags 0, found " + std::to_string(flags));
  const std::uint64_t size = get_le(f + 16, 8);
  if (size != n)
    throw error(where + (n < size ? " is truncated" : " is corrupt") + ": its header says " + std::to_string(size) +
                " bytes, found " + std::to_string(n));
  const std::uint64_t stored = get_le(f + n - 8, 8);
  const std::uint64_t actual = fnv1a64(f, n - 8);
  if (stored != actual)
    throw error(where + " is corrupt: checksum expected " + hex64(stored) + " (stored), found " + hex64(actual));

  contents out;
  out.version = static_cast<std::uint32_t>(ver);
  const std::size_t end = n - trailer_bytes;
  std::size_t at = header_bytes;
  auto need = [&](std::uint64_t k, const char* what) {
    if (k > end - at)
      throw error(where + " is corrupt: record " + std::to_string(out.records.size()) + " (" + what +
                  ") runs past the end");
  };
  auto bad_code = [&](const std::string& rec, const char* what, std::uint8_t code, std::uint8_t last) {
    throw error(where + " is corrupt: " + rec + " has " + what + " " + std::to_string(code) + ", expected 1.." +
                std::to_string(last) + " in a version-" + std::to_string(ver) + " file");
  };
  while (at < end) {
    record r;
    need(4, "name length");
    const std::uint64_t len = get_le(f + at, 4);
    at += 4;
    need(len, "name");
    r.name = std::string_view(reinterpret_cast<const char*>(f + at), len);
    at += len;
    need(4, "kind, dtype, rank");
    r.kind = f[at];
    r.dtype = f[at + 1];
    r.rank = f[at + 2];
    const std::uint8_t reserved = f[at + 3];
    at += 4;
    const std::string rec = "record " + std::to_string(out.records.size()) + " ('" + std::string(r.name) + "')";
    if (!row_of(kinds, r.kind, out.version)) bad_code(rec, "kind", r.kind, last_code(kinds, out.version));
    if (!row_of(dtypes, r.dtype, out.version)) bad_code(rec, "dtype code", r.dtype, last_code(dtypes, out.version));
    if (reserved != 0) throw error(where + " is corrupt: " + rec + " has a non-zero reserved byte");
    if (r.rank > max_rank)
      throw error(where + " is corrupt: " + rec + " has rank " + std::to_string(r.rank) + ", expected at most " +
                  std::to_string(max_rank));
    need(8 * std::uint64_t(r.rank), "dims");
    std::uint64_t numel = 1;
    bool overflow = false;
    for (std::size_t i = 0; i < r.rank; ++i) {
      const auto d = static_cast<dim_t>(get_le(f + at, 8));
      at += 8;
      if (d < 0) throw error(where + " is corrupt: " + rec + " has a negative dim " + std::to_string(d));
      r.dims[i] = d;
      if (d != 0 && numel > ~std::uint64_t(0) / static_cast<std::uint64_t>(d)) overflow = true;
      numel *= static_cast<std::uint64_t>(d);
    }
    need(8, "byte count");
    r.bytes = get_le(f + at, 8);
    at += 8;
    const std::uint64_t es = dtype_size(r.dtype);
    if (overflow || numel > ~std::uint64_t(0) / es || numel * es != r.bytes)
      throw error(where + " is corrupt: " + rec + " has " + std::to_string(r.bytes) + " data bytes, expected " +
                  (overflow ? std::string("(dims overflow)") : std::to_string(numel * es)) + " for " +
                  r.type_text());
    need(r.bytes, "data");
    r.data = reinterpret_cast<const std::byte*>(f + at);
    at += r.bytes;
    out.records.push_back(r);
  }
  const std::uint64_t count = get_le(f + end, 8);
  if (count != out.records.size())
    throw error(where + " is corrupt: its trailer says " + std::to_string(count) + " records, found " +
                std::to_string(out.records.size()));
  return out;
}

}  // namespace ctg::detail::state_file

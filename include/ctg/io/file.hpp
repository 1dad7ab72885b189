#pragma once
// Whole-file I/O for ctg's file formats (checkpoints, safetensors), with
// errors as ctg::error naming the file:
//
//   ctg::detail::write_atomically(path, "state file", [&](std::FILE* f) { ... });
//   std::vector<std::byte> bytes = ctg::detail::read_whole_file(path, "state file");
//
// write_atomically writes a temporary file of its own beside `path` (`path`
// + ".tmp.", the process and a count: two saves to one path at once, from
// two threads or processes, once shared one ".tmp" and renamed each other's
// half-written file over the last good one) through the callback (which
// throws on a failed write, naming the temporary file it is given), flushes
// and fsyncs it where POSIX is available, then renames it over `path`:
// `path` holds either the old file or a complete new one (the directory
// itself is not fsynced). On any failure the temporary file is removed and
// `path` is untouched. read_whole_file reads regular files only (a device
// or a pipe, /dev/zero, would be read until memory ran out).
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <ctg/core/error.hpp>

#if __has_include(<unistd.h>)
#include <unistd.h>
#define CTG_IO_HAVE_FSYNC 1
#else
#include <random>
#endif

namespace ctg::detail {

// A name for write_atomically's temporary file no other write uses now.
inline std::filesystem::path temporary_name(const std::filesystem::path& path) {
  static std::atomic<std::uint64_t> count{0};
#ifdef CTG_IO_HAVE_FSYNC
  static const std::string process = std::to_string(::getpid());
#else
  static const std::string process = std::to_string(std::random_device{}());
#endif
  std::filesystem::path tmp = path;
  tmp += ".tmp." + process + "." + std::to_string(++count);
  return tmp;
}

template <class Write>
void write_atomically(const std::filesystem::path& path, const char* what, Write&& write) {
  std::filesystem::path tmp;
  std::string tmp_text;
  std::FILE* f = nullptr;
  // ("x": never a file that exists; one left by a process that ended with this id takes another count.)
  for (int attempt = 0; !f && attempt < 16; ++attempt) {
    tmp = temporary_name(path);
    tmp_text = tmp.string();
    f = std::fopen(tmp_text.c_str(), "wbx");
    if (!f && errno != EEXIST) break;
  }
  if (!f) throw error("ctg: cannot create " + std::string(what) + " '" + tmp_text + "': " + std::strerror(errno));
  struct guard {  // on any failure: close and remove the temporary file
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
  write(f, tmp_text);
  const auto fail = [&](const char* step) {
    throw error("ctg: cannot write " + std::string(what) + " '" + tmp_text + "'" + step + ": " + std::strerror(errno));
  };
  if (std::fflush(f) != 0) fail("");
#ifdef CTG_IO_HAVE_FSYNC
  if (::fsync(::fileno(f)) != 0) fail(" (fsync)");
#endif
  std::FILE* closing = f;
  f = nullptr;
  if (std::fclose(closing) != 0) fail(" (close)");
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw error("ctg: cannot rename '" + tmp_text + "' to '" + path.string() + "': " + ec.message());
  g.done = true;
}

// Every byte of the file at `path`.
inline std::vector<std::byte> read_whole_file(const std::filesystem::path& path, const char* what) {
  const std::string p = path.string();
  std::error_code kind;
  if (std::filesystem::exists(path, kind) && !std::filesystem::is_regular_file(path, kind))
    throw error("ctg: cannot read " + std::string(what) + " '" + p + "': not a regular file");
  struct closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  const std::unique_ptr<std::FILE, closer> file(std::fopen(p.c_str(), "rb"));
  if (!file) throw error("ctg: cannot open " + std::string(what) + " '" + p + "': " + std::strerror(errno));
  std::FILE* f = file.get();
  std::error_code ec;
  const auto expected = std::filesystem::file_size(path, ec);
  std::vector<std::byte> buf(ec ? std::size_t(1) << 16 : static_cast<std::size_t>(expected) + 1);
  std::size_t used = 0;
  for (;;) {
    if (used == buf.size()) buf.resize(2 * buf.size());
    const std::size_t k = std::fread(buf.data() + used, 1, buf.size() - used, f);
    used += k;
    if (k == 0) break;
  }
  if (std::ferror(f) != 0) throw error("ctg: cannot read " + std::string(what) + " '" + p + "'");
  buf.resize(used);
  return buf;
}

}  // namespace ctg::detail

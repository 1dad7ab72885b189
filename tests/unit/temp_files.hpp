#pragma once
// Files for the file-format tests: a fresh directory removed at the end of
// the test, and a whole file's bytes.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace test_util {

struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const char* prefix) {
    path = std::filesystem::temp_directory_path() / (prefix + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path operator/(const char* name) const { return path / name; }
  // The names of the files in it, sorted (a save leaves its file and no temporary one).
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.insert(e.path().filename().string());
    return out;
  }
};

inline std::vector<unsigned char> read_all(const std::filesystem::path& p) {
  std::vector<unsigned char> out(std::filesystem::file_size(p));
  std::FILE* f = std::fopen(p.string().c_str(), "rb");
  REQUIRE(f);
  REQUIRE(std::fread(out.data(), 1, out.size(), f) == out.size());
  std::fclose(f);
  return out;
}

}  // namespace test_util

#pragma once
// The message of the ctg::error a callable throws, or a marker when it throws none.
#include <string>

#include <ctg/core/error.hpp>

namespace test_util {
inline std::string message_of(auto&& f) {
  try {
    f();
  } catch (const ctg::error& e) {
    return e.what();
  }
  return "<no ctg::error thrown>";
}
}  // namespace test_util

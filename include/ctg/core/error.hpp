#pragma once
// ctg::error: the one exception type for bad input found at run time.
// Messages name what went wrong, where (the leaf), the expected and the actual value.
#include <stdexcept>
#include <string>

namespace ctg {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ctg

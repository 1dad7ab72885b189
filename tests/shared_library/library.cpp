#include "model.hpp"

shared_library_test::store_t make_store_in_library(ctg::cpu::device& dev) {
  return ctg::make_store(dev, shared_library_test::make_step());
}

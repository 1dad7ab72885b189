#include "train.hpp"

int tiny_lm::train_f32(const options& o, const corpus& c) {
  return run_policy<ctg::precision::full<ctg::f32>>(o, c, "f32 (full<f32>)");
}

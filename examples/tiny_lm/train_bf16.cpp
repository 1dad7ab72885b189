#include "train.hpp"

int tiny_lm::train_bf16(const options& o, const corpus& c) {
  return run_policy<ctg::precision::autocast<ctg::bf16>>(
      o, c, "bf16 (autocast<bf16>: f32 master parameters, bf16 matmuls, f32 statistics)");
}

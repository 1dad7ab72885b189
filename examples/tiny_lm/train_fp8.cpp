#include "train.hpp"

int tiny_lm::train_fp8(const options& o, const corpus& c) {
  return run_policy<ctg::precision::fp8<ctg::precision::delayed<>>>(
      o, c, "fp8 (fp8<delayed<>>: weight products in e4m3 / e5m2 with delayed scaling, bf16 elsewhere)");
}

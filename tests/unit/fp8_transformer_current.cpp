// B4 on the transformer under current scaling (see fp8_transformer.hpp).
#include "fp8_transformer.hpp"

TEST_CASE("B4, current scaling: checkpointing every layer changes no bit over 6 AdamW steps") {
  fp8_b4::b4_on_transformer<ctg::precision::current<>>();
}

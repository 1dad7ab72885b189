#pragma once
// ctg's element types: f32, f64, bf16, f16, e4m3, e5m2 (DESIGN.md section 3).
//
//   ctg::bf16 b(1.5f);            // round-to-nearest-even
//   float f = ctg::to_float(b);   // exact
//   ctg::e4m3 q(1000.0f);         // saturates: q.bits == 0x7E (448)
//   ctg::dtype_traits<ctg::e5m2>::max == 57344.0f
//
// The narrow types are storage only (one member, `bits`). Conversions agree
// bit for bit with CUDA's cuda_bf16.h / cuda_fp16.h / cuda_fp8.h (satfinite),
// on host and device, and are constexpr. There is no operator== on them:
// compare `.bits` or convert to float. Arithmetic on e4m3/e5m2 does not
// compile ("ctg: fp8 needs a scale").

#include <ctg/core/bf16.hpp>
#include <ctg/core/dtype_traits.hpp>
#include <ctg/core/f16.hpp>
#include <ctg/core/fp8.hpp>

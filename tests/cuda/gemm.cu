// cuBLASLt runs the CUDA backend's GEMM plans (exec/cuda/gemm.cuh): plans of
// every kind (f32, f64, bf16 and FP8; transposed operands; one strided
// batch, batches folded into rows, one call per broadcast batch; products
// summed over their batches; FP8's transposed copies) against host loops in
// double, within the bound of an f32 accumulation of K terms (FP8: 14-bit
// partial sums, see u_acc) and one rounding to the result type. FP8
// products run where the GPU has FP8 GEMMs (compute capability 8.9+), and
// say so where it has not. Without a GPU: skipped (77).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <ctg/core/dtypes.hpp>
#include <ctg/exec/cpu/matmul.hpp>
#include <ctg/exec/cuda/gemm.cuh>

#include "../common/rt_shapes.hpp"
#include "device_test.hpp"

namespace {
using ctg::dim_t;
namespace cu = ctg::cuda;
constexpr auto shape = test_shapes::dims;


// The unit roundoff of a result type.
template <class T>
constexpr double unit_roundoff() {
  return static_cast<double>(ctg::dtype_traits<T>::epsilon) / 2;
}

// Device memory for n values, freed with it.
struct device_bytes {
  void* p = nullptr;
  explicit device_bytes(std::size_t bytes) { CTG_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1)); }
  ~device_bytes() { (void)cudaFree(p); }
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
};
template <class T>
void upload(device_bytes& d, const std::vector<T>& h) {
  CTG_CUDA_CHECK(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// A value as double: f64 as it is (to_float would round it to f32).
template <class T>
double value_of(T x) {
  if constexpr (std::is_same_v<T, ctg::f64>) return x;
  else return static_cast<double>(ctg::to_float(x));
}

template <class T>
std::vector<T> random_values(dim_t n, unsigned seed, float range) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = ctg::from_float<T>(u(rng));
  return v;
}

// C = alpha op(A) op(B) for shapes a, b (as stored) and c (the product's
// shape; summed: C is its sum over the batches, [M, N]), by the definition
// in double; runs the plan on the GPU and compares. Prints one line.
template <class TA, class TB, class TD>
bool check(const cu::device& dev, cu::gemm_runner& lt, const char* name, ctg::rt_shape a, ctg::rt_shape b,
           ctg::rt_shape c, bool ta, bool tb, bool fp8, bool summed = false) {
  const auto av = random_values<TA>(a.numel(), 1, fp8 ? 4.0f : 1.0f);
  const auto bv = random_values<TB>(b.numel(), 2, fp8 ? 4.0f : 1.0f);
  const float sa = fp8 ? 0.5f : 1.0f, sb = fp8 ? 0.25f : 1.0f;  // scale_inv of A and of B
  const dim_t M = c.d[c.rank - 2], N = c.d[c.rank - 1], K = ta ? a.d[a.rank - 2] : a.d[a.rank - 1];
  const ctg::rt_shape d = summed ? shape({M, N}) : c;  // (the result's shape)
  const cu::gemm_plan p = cu::plan_gemm(a, b, d, cu::gemm_type_of<TA>(), cu::gemm_type_of<TB>(),
                                        cu::gemm_type_of<TD>(), fp8, ta, tb, summed);

  device_bytes da(av.size() * sizeof(TA)), db(bv.size() * sizeof(TB)), dd(static_cast<std::size_t>(d.numel()) * sizeof(TD));
  device_bytes dat(static_cast<std::size_t>(p.scratch_a) * sizeof(TA)), dbt(static_cast<std::size_t>(p.scratch_b) * sizeof(TB));
  device_bytes scales(8 * sizeof(float));
  upload(da, av);
  upload(db, bv);
  upload(scales, std::vector<float>{sa, 0, 0, 0, sb});  // (16-byte aligned: see gemm_runner::run)
  const float* s = static_cast<const float*>(scales.p);
  lt.run(p, {da.p, db.p, dd.p, dat.p, dbt.p, s, s + 4});
  dev.synchronize();
  std::vector<TD> got(static_cast<std::size_t>(d.numel()));
  CTG_CUDA_CHECK(cudaMemcpy(got.data(), dd.p, got.size() * sizeof(TD), cudaMemcpyDeviceToHost));

  // Each output's sum and the sum of its terms' magnitudes, over K (and over the batches when summed).
  std::vector<double> want(got.size()), mag(got.size());
  dim_t terms = K;
  ctg::detail::for_each_batch(a, b, c, [&](dim_t t, dim_t oa, dim_t ob) {
    const TA* am = av.data() + oa * M * K;
    const TB* bm = bv.data() + ob * K * N;
    if (summed && t > 0) terms += K;
    for (dim_t i = 0; i < M; ++i)
      for (dim_t j = 0; j < N; ++j) {
        const std::size_t o = static_cast<std::size_t>((summed ? 0 : t) * M * N + i * N + j);
        for (dim_t k = 0; k < K; ++k) {
          const double x = value_of(ta ? am[k * M + i] : am[i * K + k]) * value_of(tb ? bm[j * K + k] : bm[k * N + j]);
          want[o] += x;
          mag[o] += std::abs(x);
        }
      }
  });
  const double alpha = static_cast<double>(sa) * static_cast<double>(sb);
  // The accumulation's unit roundoff: f64 and f32 as their types; FP8
  // tensor-core products on Hopper keep about 14 bits of each partial sum
  // before cuBLASLt adds it into f32 (DeepSeek-V3 technical report, 3.3.2;
  // seen here: f32-accumulation bounds missed by up to 29x), so 2^-14.
  const double u_acc = std::is_same_v<TD, ctg::f64> ? 0x1p-53 : fp8 ? 0x1p-14 : 0x1p-24;
  double worst = 0;
  int bad = 0;
  for (std::size_t o = 0; o < got.size(); ++o) {
    // (A summed product's calls each round their partial sum into D: one more rounding per call.)
    const double acc_error = double(terms + (summed ? static_cast<dim_t>(p.calls.size()) : 0) + 2) * u_acc * alpha * mag[o];
    const double w = alpha * want[o];
    const double bound = acc_error + unit_roundoff<TD>() * (std::abs(w) + acc_error) + 1e-30;
    const double v = value_of(got[o]);
    const double ratio = std::abs(v - w) / bound;
    if (!(ratio <= 1.0) && bad++ < 3) std::printf("  %s: element %zu: %.9g, want %.9g\n", name, o, v, w);
    if (ratio > worst || ratio != ratio) worst = ratio;
  }
  std::printf("%-44s %zu call(s), %zu transposed cop%s: worst error / bound %.3f %s\n", name, p.calls.size(),
              p.transposes.size(), p.transposes.size() == 1 ? "y" : "ies", worst, bad ? "FAILED" : "ok");
  return bad == 0;
}
// An FP8 product cuBLASLt would refuse with CUBLAS_STATUS_NOT_SUPPORTED: a
// ctg::error saying why instead (a scale pointer not 16-byte aligned; a dim
// not a multiple of 16).
bool fp8_refused(cu::gemm_runner& lt, const char* name, dim_t k, int scale_offset, const char* message) {
  const cu::gemm_plan p = cu::plan_gemm(shape({16, k}), shape({16, k}), shape({16, 16}), cu::gemm_type::e4m3,
                                        cu::gemm_type::e4m3, cu::gemm_type::bf16, true, false, true);
  device_bytes a(static_cast<std::size_t>(16 * k)), b(static_cast<std::size_t>(16 * k)), d(512), scales(64);
  const float* s = static_cast<const float*>(scales.p);
  try {
    lt.run(p, {a.p, b.p, d.p, nullptr, nullptr, s, s + scale_offset});
  } catch (const ctg::error& e) {
    const bool ok = std::string(e.what()).find(message) == 0;
    std::printf("%-44s %s: %s\n", name, ok ? "ok" : "FAILED", e.what());
    return ok;
  }
  std::printf("%s: no error: FAILED\n", name);
  return false;
}
}  // namespace

int main() {
  return run_device_test([](const cu::device& dev) {
    using ctg::bf16, ctg::f32, ctg::f64, ctg::e4m3, ctg::e5m2;
    cu::gemm_runner lt(dev);
    bool ok = true;
    ok &= check<f32, f32, f32>(dev, lt, "f32 17x33 @ 33x9", shape({17, 33}), shape({33, 9}), shape({17, 9}), false, false, false);
    ok &= check<f32, f32, f32>(dev, lt, "f32 a^T", shape({33, 17}), shape({33, 9}), shape({17, 9}), true, false, false);
    ok &= check<f32, f32, f32>(dev, lt, "f32 b^T", shape({17, 33}), shape({9, 33}), shape({17, 9}), false, true, false);
    ok &= check<f32, f32, f32>(dev, lt, "f32 a^T b^T", shape({33, 17}), shape({9, 33}), shape({17, 9}), true, true, false);
    ok &= check<f64, f64, f64>(dev, lt, "f64 b^T", shape({17, 33}), shape({9, 33}), shape({17, 9}), false, true, false);
    ok &= check<bf16, bf16, bf16>(dev, lt, "bf16 strided batch [3]", shape({3, 17, 33}), shape({3, 33, 9}),
                                  shape({3, 17, 9}), false, false, false);
    ok &= check<bf16, bf16, bf16>(dev, lt, "bf16 batches folded into rows", shape({4, 17, 33}), shape({33, 9}),
                                  shape({4, 17, 9}), false, false, false);
    ok &= check<bf16, bf16, f32>(dev, lt, "bf16 broadcast batches, one call each", shape({2, 1, 17, 33}),
                                 shape({3, 33, 9}), shape({2, 3, 17, 9}), false, false, false);
    ok &= check<bf16, bf16, f32>(dev, lt, "bf16 a^T, shared b^T (attention's dk)", shape({2, 33, 17}), shape({9, 33}),
                                 shape({2, 17, 9}), true, true, false);
    // Weight gradients summed over the batches: a call per batch adding to D (beta 1), and, where the batches
    // lie end to end along K (x^T dy), one call.
    ok &= check<bf16, bf16, f32>(dev, lt, "bf16 summed over [3], a call each (dy x)", shape({3, 17, 33}),
                                 shape({3, 33, 9}), shape({3, 17, 9}), false, false, false, true);
    ok &= check<bf16, bf16, f32>(dev, lt, "bf16 summed over [2, 3] along K (x^T dy)", shape({2, 3, 33, 17}),
                                 shape({2, 3, 33, 9}), shape({2, 3, 17, 9}), true, false, false, true);
    ok &= check<f32, f32, f32>(dev, lt, "f32 summed, a broadcast b^T", shape({4, 17, 33}), shape({9, 33}),
                               shape({4, 17, 9}), false, true, false, true);
    if (!dev.has_fp8_gemm()) {
      std::printf("FP8 products not run: compute capability %d (cuBLASLt FP8 needs 8.9+)\n", dev.compute_capability());
      return ok;
    }
    ok &= check<e4m3, e4m3, bf16>(dev, lt, "fp8 e4m3 @ e4m3 -> bf16 (b copied, TN)", shape({64, 32}), shape({32, 48}),
                                  shape({64, 48}), false, false, true);
    ok &= check<e4m3, e4m3, f32>(dev, lt, "fp8 a^T @ b^T -> f32 (a copied)", shape({32, 64}), shape({48, 32}),
                                 shape({64, 48}), true, true, true);
    ok &= check<e5m2, e4m3, bf16>(dev, lt, "fp8 e5m2 @ e4m3^T (a gradient)", shape({64, 48}), shape({32, 48}),
                                  shape({64, 32}), false, true, true);
    ok &= fp8_refused(lt, "fp8 scale pointer 4 bytes past 16", 16, 1,
                      "ctg: cuBLASLt FP8 scale pointers must be 16-byte aligned");
    ok &= fp8_refused(lt, "fp8 inner dim 88", 88, 4,
                      "ctg: fp8_matmul on a GPU needs every dim of the product a multiple of 16");
    ok &= check<e4m3, e4m3, bf16>(dev, lt, "fp8 strided batch [2]", shape({2, 32, 64}), shape({2, 64, 32}),
                                  shape({2, 32, 32}), false, false, true);
    // FP8 weight gradients summed over the batches into an f32 D: end to end along K (x^T dy: both operands
    // copied transposed as one matrix, one call), and a call per batch with beta 1 (dy x: x copied per batch).
    ok &= check<e4m3, e5m2, f32>(dev, lt, "fp8 summed over [2] along K (x^T dy)", shape({2, 32, 48}),
                                 shape({2, 32, 16}), shape({2, 48, 16}), true, false, true, true);
    ok &= check<e5m2, e4m3, f32>(dev, lt, "fp8 summed over [3], a call each (dy x)", shape({3, 32, 48}),
                                 shape({3, 48, 16}), shape({3, 32, 16}), false, false, true, true);
    return ok;
  });
}

// The element functions every fused group inlines (ctg::op::*::apply, over
// f32) and dropout's Philox stream, run in a kernel and compared bit for bit
// with the same functions on the host: the ground the CUDA backend's
// "bitwise equal to the CPU for elementwise groups" stands on. Also the
// runtime layer: device properties, arena, and CUDA failures as ctg::error.
// Without a GPU: prints why and returns 77 (ctest: skipped).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <ctg/core/philox.hpp>
#include <ctg/exec/cuda/runtime.cuh>
#include <ctg/graph/node.hpp>

#include "device_test.hpp"

namespace {

using ctg::detail::f32_bits;
using ctg::detail::f32_from_bits;

template <class Op>
__global__ void unary_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    y[i] = Op::apply(x[i]);
}

template <class Op>
__global__ void binary_kernel(const float* a, const float* b, float* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    y[i] = Op::apply(a[i], b[i]);
}

__global__ void philox_kernel(std::uint64_t seed, std::uint64_t step, std::uint32_t stream, float* u, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    u[i] = ctg::philox_uniform(seed, step, stream, i);
}
__global__ void dropout_kernel(ctg::random_key key, std::uint32_t stream, float* v, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    v[i] = ctg::dropout_value<0.15>(key, stream, i);
}

template <class T>
struct device_vector {
  ctg::cuda::arena mem;
  std::size_t n;
  explicit device_vector(std::size_t count) : n(count) { mem.reserve(count * sizeof(T) + 1); }
  explicit device_vector(const std::vector<T>& h) : device_vector(h.size()) {
    CTG_CUDA_CHECK(cudaMemcpy(mem.data(), h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  T* data() const { return reinterpret_cast<T*>(mem.data()); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    CTG_CUDA_CHECK(cudaMemcpy(h.data(), mem.data(), n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

// f32 inputs: every 2^9-th bit pattern (8.4 M values over the whole range,
// NaNs included) plus the special values and the neighbourhood of 0 and 1.
std::vector<float> sample_inputs() {
  std::vector<float> v;
  for (std::uint64_t b = 0; b <= 0xFFFFFFFFull; b += 512) v.push_back(f32_from_bits(static_cast<std::uint32_t>(b)));
  for (std::uint32_t b : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x00000001u, 0x807FFFFFu,
                          0x3F800000u, 0xBF800000u, 0x3F000000u, 0x7F7FFFFFu, 0xFF7FFFFFu})
    v.push_back(f32_from_bits(b));
  for (std::uint32_t d = 0; d < 4096; ++d) {
    v.push_back(f32_from_bits(0x3F800000u + d));
    v.push_back(f32_from_bits(0x3F800000u - d));
    v.push_back(f32_from_bits(d));
  }
  return v;
}

// Bitwise, except that any NaN equals any NaN (payloads are not specified).
bool same(float a, float b) { return f32_bits(a) == f32_bits(b) || (a != a && b != b); }

struct tally {
  int failed_checks = 0;
  void report(const char* what, std::size_t n, std::size_t bad, std::size_t first) {
    if (bad) ++failed_checks;
    std::printf("%-14s %9zu inputs, %zu differ%s", what, n, bad, bad ? " (first at " : "\n");
    if (bad) std::printf("%zu)\n", first);
  }
};

template <class Op>
void check_unary(const ctg::cuda::device& dev, const char* name, const std::vector<float>& x,
                 const device_vector<float>& dx, tally& t) {
  device_vector<float> dy(x.size());
  unary_kernel<Op><<<dev.blocks_for(x.size(), 256), 256, 0, dev.stream()>>>(dx.data(), dy.data(), x.size());
  ctg::cuda::check_launch(name);
  dev.synchronize();
  const std::vector<float> y = dy.host();
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!same(y[i], Op::apply(x[i])) && bad++ == 0) first = i;
  t.report(name, x.size(), bad, first);
}

template <class Op>
void check_binary(const ctg::cuda::device& dev, const char* name, const std::vector<float>& a,
                  const std::vector<float>& b, const device_vector<float>& da, const device_vector<float>& db,
                  tally& t) {
  device_vector<float> dy(a.size());
  binary_kernel<Op><<<dev.blocks_for(a.size(), 256), 256, 0, dev.stream()>>>(da.data(), db.data(), dy.data(),
                                                                             a.size());
  ctg::cuda::check_launch(name);
  dev.synchronize();
  const std::vector<float> y = dy.host();
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same(y[i], Op::apply(a[i], b[i])) && bad++ == 0) first = i;
  t.report(name, a.size(), bad, first);
}

// A failing CUDA call and a bad launch must each surface as ctg::error naming the call.
void check_errors(tally& t) {
  auto expect = [&](const char* what, auto&& f, const char* must_contain) {
    std::string msg;
    try {
      f();
    } catch (const ctg::error& e) {
      msg = e.what();
    }
    const bool ok = msg.find(must_contain) != std::string::npos && msg.rfind("ctg: CUDA", 0) == 0;
    std::printf("%-14s %s: %s\n", what, ok ? "ok" : "WRONG", msg.empty() ? "(no ctg::error thrown)" : msg.c_str());
    if (!ok) ++t.failed_checks;
  };
  expect("huge alloc", [] { ctg::cuda::arena a; a.reserve(std::size_t{1} << 60); }, "cudaMalloc");
  expect("bad launch", [] {
    unary_kernel<ctg::op::exp><<<1, 4096>>>(nullptr, nullptr, 0);  // 4096 threads per block: invalid
    ctg::cuda::check_launch("unary_kernel<exp>");
  }, "unary_kernel<exp>");
  expect("bad device", [] { ctg::cuda::device d(1 << 20); }, "requested");
}

}  // namespace

int main() {
  return run_device_test([](const ctg::cuda::device& dev) {
    tally t;
    const std::vector<float> x = sample_inputs();
    const device_vector<float> dx(x);
    namespace op = ctg::op;
#define CTG_CHECK_UNARY(NAME) check_unary<op::NAME>(dev, #NAME, x, dx, t)
    CTG_CHECK_UNARY(neg);
    CTG_CHECK_UNARY(exp);
    CTG_CHECK_UNARY(log);
    CTG_CHECK_UNARY(sqrt);
    CTG_CHECK_UNARY(rsqrt);
    CTG_CHECK_UNARY(square);
    CTG_CHECK_UNARY(abs);
    CTG_CHECK_UNARY(relu);
    CTG_CHECK_UNARY(sigmoid);
    CTG_CHECK_UNARY(tanh);
    CTG_CHECK_UNARY(silu);
    CTG_CHECK_UNARY(gelu);
    CTG_CHECK_UNARY(sign);
    CTG_CHECK_UNARY(step);
    CTG_CHECK_UNARY(silu_grad);
    CTG_CHECK_UNARY(gelu_grad);
#undef CTG_CHECK_UNARY
    // Pairs: the sample against itself reversed (every magnitude against every other scale).
    const std::vector<float> b(x.rbegin(), x.rend());
    const device_vector<float> db(b);
    check_binary<op::add>(dev, "add", x, b, dx, db, t);
    check_binary<op::sub>(dev, "sub", x, b, dx, db, t);
    check_binary<op::mul>(dev, "mul", x, b, dx, db, t);
    check_binary<op::div>(dev, "div", x, b, dx, db, t);
    check_binary<op::div_by_count>(dev, "div_by_count", x, b, dx, db, t);
    check_binary<op::keep_where>(dev, "keep_where", x, b, dx, db, t);

    // Dropout's stream: the same uniforms for 2^22 element indices, at a
    // step count with a high word (64-bit keys); then dropout's values at p =
    // 0.15 (its f32 scale, 1 / float(0.85)) on layer 3 of a stack.
    {
      constexpr std::size_t n = std::size_t{1} << 22;
      constexpr std::uint64_t step = (std::uint64_t{3} << 32) + 7;
      device_vector<float> du(n);
      philox_kernel<<<dev.blocks_for(n, 256), 256, 0, dev.stream()>>>(2026, step, 0xC0FFEEu, du.data(), n);
      ctg::cuda::check_launch("philox_kernel");
      dev.synchronize();
      const std::vector<float> u = du.host();
      std::size_t bad = 0, first = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (!same(u[i], ctg::philox_uniform(2026, step, 0xC0FFEEu, i)) && bad++ == 0) first = i;
      t.report("philox", n, bad, first);

      const ctg::random_key key{2026, step, 3};
      dropout_kernel<<<dev.blocks_for(n, 256), 256, 0, dev.stream()>>>(key, 0xC0FFEEu, du.data(), n);
      ctg::cuda::check_launch("dropout_kernel");
      dev.synchronize();
      const std::vector<float> d = du.host();
      bad = first = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (!same(d[i], ctg::dropout_value<0.15>(key, 0xC0FFEEu, i)) && bad++ == 0) first = i;
      t.report("dropout_value p=0.15", n, bad, first);
    }
    check_errors(t);
    return t.failed_checks == 0;
  });
}

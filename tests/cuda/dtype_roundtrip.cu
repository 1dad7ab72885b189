// ctg's narrow element types on the device: every narrow bit pattern and a
// large f32 sample converted inside kernels, both with ctg's types and with
// CUDA's own intrinsics (__float2bfloat16, __float2half, __nv_cvt_float_to_fp8
// satfinite, and back), compared bit for bit with ctg's host results.
// Without a GPU: prints "no CUDA device: skipped" and returns 77.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include <ctg/core/dtypes.hpp>

#include "../unit/dtype_test_util.hpp"

namespace {

// CUDA's conversions, as device functions, one overload set per type.
template <class T>
struct cuda_conv;

template <>
struct cuda_conv<ctg::bf16> {
  __device__ static std::uint32_t enc(float x) { return __nv_bfloat16_raw(__float2bfloat16(x)).x; }
  __device__ static float dec(std::uint32_t b) {
    __nv_bfloat16_raw r;
    r.x = static_cast<unsigned short>(b);
    return __bfloat162float(__nv_bfloat16(r));
  }
};
template <>
struct cuda_conv<ctg::f16> {
  __device__ static std::uint32_t enc(float x) { return __half_raw(__float2half(x)).x; }
  __device__ static float dec(std::uint32_t b) {
    __half_raw r;
    r.x = static_cast<unsigned short>(b);
    return __half2float(__half(r));
  }
};
template <__nv_fp8_interpretation_t K>
struct cuda_fp8_conv {
  __device__ static std::uint32_t enc(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, K); }
  __device__ static float dec(std::uint32_t b) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), K)));
  }
};
template <>
struct cuda_conv<ctg::e4m3> : cuda_fp8_conv<__NV_E4M3> {};
template <>
struct cuda_conv<ctg::e5m2> : cuda_fp8_conv<__NV_E5M2> {};

// Per f32 input: ctg's encoding and CUDA's.
template <class T>
__global__ void encode_kernel(const float* in, std::uint32_t* ctg_out, std::uint32_t* cuda_out, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    ctg_out[i] = T(in[i]).bits;
    cuda_out[i] = cuda_conv<T>::enc(in[i]);
  }
}

// Eight consecutive inputs a thread, stored as T side by side (as a fused
// group's chunks are): ptxas may then pack two conversions into one
// instruction (F2FP.*.PACK_AB), a form the kernel above, a value at a time,
// does not produce.
template <class T>
__global__ void encode_chunks_kernel(const float* in, T* out, std::size_t chunks) {
  for (std::size_t c = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; c < chunks;
       c += std::size_t{gridDim.x} * blockDim.x) {
    T v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = T(in[c * 8 + k]);
#pragma unroll
    for (int k = 0; k < 8; ++k) out[c * 8 + k] = v[k];
  }
}

// Per narrow pattern: ctg's f32 bits, CUDA's f32 bits, and ctg's round trip.
template <class T>
__global__ void decode_kernel(std::uint32_t patterns, std::uint32_t* ctg_f, std::uint32_t* cuda_f,
                              std::uint32_t* ctg_back) {
  for (std::uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < patterns; c += gridDim.x * blockDim.x) {
    const T v = T::from_bits(static_cast<decltype(T::bits)>(c));
    const float f = static_cast<float>(v);
    ctg_f[c] = ctg::detail::f32_bits(f);
    cuda_f[c] = ctg::detail::f32_bits(cuda_conv<T>::dec(c));
    ctg_back[c] = T(f).bits;
  }
}

bool ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    return false;
  }
  return true;
}

template <class U>
struct device_buffer {
  U* p = nullptr;
  explicit device_buffer(std::size_t n) { ok(cudaMalloc(&p, n * sizeof(U) + 1), "cudaMalloc"); }
  ~device_buffer() { cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

template <class U>
std::vector<U> to_host(const device_buffer<U>& d, std::size_t n) {
  std::vector<U> h(n);
  ok(cudaMemcpy(h.data(), d.p, n * sizeof(U), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return h;
}

// Returns the number of mismatches (or 1 on a CUDA error).
template <class T>
std::uint64_t run_type(const char* name) {
  const ctg_test::format fmt = ctg_test::format_of<T>();
  const ctg_test::value_table table(fmt);
  std::uint64_t bad = 0;
  auto mismatch = [&](const char* what, std::uint32_t key, std::uint32_t got, std::uint32_t want) {
    if (++bad <= 10) std::printf("  %s %s: input 0x%08x: got 0x%08x, want 0x%08x\n", name, what, key, got, want);
  };

  // all narrow patterns
  const std::uint32_t patterns = 1u << fmt.storage_bits;
  device_buffer<std::uint32_t> d_f(patterns), d_cf(patterns), d_back(patterns);
  decode_kernel<T><<<256, 256>>>(patterns, d_f.p, d_cf.p, d_back.p);
  if (!ok(cudaGetLastError(), "decode_kernel") || !ok(cudaDeviceSynchronize(), "decode_kernel")) return 1;
  const auto f = to_host(d_f, patterns), cf = to_host(d_cf, patterns), back = to_host(d_back, patterns);
  for (std::uint32_t c = 0; c < patterns; ++c) {
    const T v = T::from_bits(static_cast<decltype(T::bits)>(c));
    const float hf = static_cast<float>(v);
    const std::uint32_t want = ctg_test::bits_of(hf);
    if (f[c] != want) mismatch("device ctg decode", c, f[c], want);
    if (cf[c] != want) mismatch("device CUDA decode", c, cf[c], want);
    const std::uint32_t want_back = T(hf).bits;
    if (back[c] != want_back) mismatch("device ctg round trip", c, back[c], want_back);
  }

  // the f32 sample
  std::vector<float> in;
  in.reserve(ctg_test::stride_count + ctg_test::focused_count + 1'000'000);
  const ctg_test::sample_counts n = ctg_test::for_each_sample(table, [&](float x) { in.push_back(x); });
  device_buffer<float> d_in(in.size());
  device_buffer<std::uint32_t> d_ctg(in.size()), d_cuda(in.size());
  if (!ok(cudaMemcpy(d_in.p, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy H2D"))
    return 1;
  encode_kernel<T><<<1024, 256>>>(d_in.p, d_ctg.p, d_cuda.p, in.size());
  if (!ok(cudaGetLastError(), "encode_kernel") || !ok(cudaDeviceSynchronize(), "encode_kernel")) return 1;
  const auto g = to_host(d_ctg, in.size()), gc = to_host(d_cuda, in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t want = T(in[i]).bits;
    if (g[i] != want) mismatch("device ctg encode", ctg_test::bits_of(in[i]), g[i], want);
    if (gc[i] != want) mismatch("device CUDA encode", ctg_test::bits_of(in[i]), gc[i], want);
  }
  const std::size_t chunks = in.size() / 8;
  device_buffer<T> d_packed(chunks * 8);
  encode_chunks_kernel<T><<<1024, 256>>>(d_in.p, d_packed.p, chunks);
  if (!ok(cudaGetLastError(), "encode_chunks_kernel") || !ok(cudaDeviceSynchronize(), "encode_chunks_kernel")) return 1;
  const auto packed = to_host(d_packed, chunks * 8);
  for (std::size_t i = 0; i < chunks * 8; ++i) {
    const std::uint32_t want = T(in[i]).bits;
    if (packed[i].bits != want) mismatch("device ctg encode, 8 a thread", ctg_test::bits_of(in[i]), packed[i].bits, want);
  }
  std::printf("%s: %u patterns decoded + round-tripped, %llu f32 inputs encoded, on device by ctg and by CUDA, "
              "vs ctg on host: %llu mismatches\n",
              name, patterns, static_cast<unsigned long long>(n.total()), static_cast<unsigned long long>(bad));
  return bad;
}

}  // namespace

int main() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("no CUDA device: skipped (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  std::uint64_t bad = 0;
  bad += run_type<ctg::bf16>("bf16");
  bad += run_type<ctg::f16>("f16");
  bad += run_type<ctg::e4m3>("e4m3");
  bad += run_type<ctg::e5m2>("e5m2");
  std::printf("%s\n", bad == 0 ? "all conversions agree" : "MISMATCHES");
  return bad == 0 ? 0 : 1;
}

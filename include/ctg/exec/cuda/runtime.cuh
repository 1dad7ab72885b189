#pragma once
// The CUDA backend's runtime layer: errors, the device (with its stream) and
// the device memory arena. The fused kernels and cuBLASLt GEMMs of the CUDA
// store are built on these.
//
// Every CUDA call goes through CTG_CUDA_CHECK, which turns a failure into a
// ctg::error naming the call and CUDA's message ("ctg: CUDA call
// cudaMalloc(&p, bytes) failed: cudaErrorMemoryAllocation: out of memory").
//
// Numerics: the element functions are shared with the CPU backend and give
// the same bits only when neither side fuses a multiply with an add that the
// source keeps apart, so CUDA code using ctg is compiled with --fmad=false
// (tests/cuda/CMakeLists.txt); ctg's own math already rounds its products
// explicitly (core/math.hpp).
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include <ctg/core/error.hpp>
#include <ctg/exec/cuda/launch_geometry.hpp>

namespace ctg::cuda {

// The calling thread's place in its launch (launch_geometry.hpp).
__device__ inline thread_place this_thread() { return {blockIdx.x, threadIdx.x, gridDim.x, blockDim.x}; }

// Throws ctg::error for a failed CUDA runtime call; `call` is its source text.
inline void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw error(std::string("ctg: CUDA call ") + call + " failed: " + cudaGetErrorName(status) + ": " +
              cudaGetErrorString(status));
}

// A kernel launch reports a bad configuration only through the next error
// query: call this right after a launch, naming the kernel.
inline void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return;
  throw error(std::string("ctg: CUDA launch of ") + kernel + " failed: " + cudaGetErrorName(status) + ": " +
              cudaGetErrorString(status));
}

#define CTG_CUDA_CHECK(call) ::ctg::cuda::check((call), #call)

// How many devices this process can use (0 when there is no driver or no GPU:
// never an error, so callers can report themselves skipped).
inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" state
    return 0;
  }
  return n;
}

// One GPU and one stream. Everything a store does on the device is ordered on
// that stream; sizing decisions read the properties queried here once.
class device {
 public:
  explicit device(int index = 0) : index_(index) {
    const int n = device_count();
    if (index < 0 || index >= n)
      throw error("ctg: CUDA device " + std::to_string(index) + " requested, " + std::to_string(n) +
                  " present");
    CTG_CUDA_CHECK(cudaSetDevice(index));
    cudaDeviceProp p{};
    CTG_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
    name_ = p.name;
    sm_count_ = p.multiProcessorCount;
    major_ = p.major;
    minor_ = p.minor;
    CTG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~device() {
    if (stream_) (void)cudaStreamDestroy(stream_);
  }
  device(const device&) = delete;
  device& operator=(const device&) = delete;
  device(device&& o) noexcept
      : index_(o.index_), name_(std::move(o.name_)), sm_count_(o.sm_count_), major_(o.major_), minor_(o.minor_),
        stream_(std::exchange(o.stream_, nullptr)) {}

  int index() const { return index_; }
  const std::string& name() const { return name_; }
  int sm_count() const { return sm_count_; }
  int compute_capability() const { return major_ * 10 + minor_; }
  // FP8 tensor-core GEMMs (cuBLASLt e4m3/e5m2) need compute capability 8.9+.
  bool has_fp8_gemm() const { return compute_capability() >= 89; }
  cudaStream_t stream() const { return stream_; }
  void synchronize() const { CTG_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // Blocks for a grid-stride loop over n elements, `per_thread` each: enough
  // to fill every SM a few times over, never more than the work needs.
  // (exec/cuda/launch_geometry.hpp, tested on the CPU)
  unsigned blocks_for(std::size_t n, unsigned threads, std::size_t per_thread = 1) const {
    return cuda::blocks_for(n, threads, static_cast<unsigned>(sm_count_), per_thread);
  }

 private:
  int index_ = 0;
  std::string name_;
  int sm_count_ = 0, major_ = 0, minor_ = 0;
  cudaStream_t stream_ = nullptr;
};

// How many times ctg allocated or freed device memory in this process. A
// captured graph holds addresses: it is replayed only while this count is
// the one it was captured at (exec/cuda/step_graphs.cuh).
inline std::atomic<std::uint64_t> allocations{0};
inline std::uint64_t allocation_epoch() { return allocations.load(std::memory_order_relaxed); }

// One device allocation per store, sized by the schedule before a step runs
// (reserve), so a step itself never allocates. Growing frees the old block:
// only between steps.
class arena {
 public:
  arena() = default;
  ~arena() { release(); }
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;
  arena(arena&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

  // Grown on demand (zero-filled, like cpu::arena: the store relies on it), never shrunk.
  void reserve(std::size_t bytes) {
    if (bytes <= bytes_) return;
    release();
    void* p = nullptr;
    CTG_CUDA_CHECK(cudaMalloc(&p, bytes));
    data_ = static_cast<std::byte*>(p);
    bytes_ = bytes;
    ++allocations;
    // cudaMemset runs on the legacy default stream, which a store's stream
    // (non-blocking) does not wait for: done before any kernel writes here.
    CTG_CUDA_CHECK(cudaMemset(data_, 0, bytes));
    CTG_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }

 private:
  void release() {
    if (data_) {
      (void)cudaFree(data_);
      ++allocations;
    }
    data_ = nullptr;
    bytes_ = 0;
  }
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Scratch a runner takes during a step: `bytes` of `a`, reserved before the
// step's first launch (backend::scratch_for), so a step never allocates (a
// cudaMalloc or cudaFree among its launches would wait for the device).
inline std::byte* take_reserved(arena& a, std::size_t bytes, const char* what) {
  if (a.size() < bytes)
    throw error(std::string("ctg: internal: ") + what + " ran before its " + std::to_string(bytes) +
                " bytes of scratch were reserved (backend::scratch_for)");
  return a.data();
}

}  // namespace ctg::cuda

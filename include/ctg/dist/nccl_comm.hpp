#pragma once
// dist::nccl_comm: GPU ranks over NCCL (from the CUDA toolkit). Include it
// only in programs built with the CUDA runtime and NCCL (CMake:
// CUDA::cudart and the toolkit's libnccl); the rest of ctg needs neither.
//
//   ncclUniqueId id = rank == 0 ? ctg::dist::nccl_comm::make_id() : ...;  // rank 0 makes it, shares it (e.g. over MPI)
//   ctg::dist::nccl_comm comm(id, rank, size, /*device=*/rank);
//   auto one = ctg::dist::nccl_comm::single();                        // one process, one GPU
//
// The two collectives take host or device memory: host buffers (what
// dist::data_parallel passes today) are staged through device buffers the
// communicator keeps; device buffers are used in place. all_gather is
// ncclAllGather; all_to_all is one ncclSend and one ncclRecv per rank in a
// group. Bytes travel as ncclUint8, FP8 payloads too (no NCCL FP8 type).
// Every NCCL or CUDA failure becomes a ctg::error naming the call and the
// library's message. The calls are synchronous: each waits for its stream.
#include <string>

#include <cuda_runtime.h>
#include <nccl.h>

#include <ctg/dist/communicator.hpp>

namespace ctg::dist {

class nccl_comm final : public communicator {
 public:
  static ncclUniqueId make_id() {
    ncclUniqueId id;
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    return id;
  }
  // Rank `rank` of `size`, joined by `id`, on CUDA device `device`.
  nccl_comm(const ncclUniqueId& id, int rank, int size, int device = 0) : rank_(rank), size_(size), device_(device) {
    cuda(cudaSetDevice(device), "cudaSetDevice");
    cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
  }
  // One process, one rank.
  static nccl_comm single(int device = 0) { return nccl_comm(make_id(), 0, 1, device); }

  nccl_comm(nccl_comm&& o) noexcept
      : comm_(o.comm_), stream_(o.stream_), rank_(o.rank_), size_(o.size_), device_(o.device_), staging_(o.staging_),
        staged_(o.staged_) {
    o.comm_ = nullptr;
    o.stream_ = nullptr;
    o.staging_ = nullptr;
    o.staged_ = 0;
  }
  nccl_comm(const nccl_comm&) = delete;
  nccl_comm& operator=(const nccl_comm&) = delete;
  nccl_comm& operator=(nccl_comm&&) = delete;
  ~nccl_comm() override {
    if (staging_) cudaFree(staging_);
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

 protected:
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t block) override {
    run(send, block, recv, block * static_cast<std::size_t>(size_), [&](const std::byte* s, std::byte* r) {
      check(ncclAllGather(s, r, block, ncclUint8, comm_, stream_), "ncclAllGather");
    });
  }
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t block) override {
    const std::size_t all = block * static_cast<std::size_t>(size_);
    run(send, all, recv, all, [&](const std::byte* s, std::byte* r) {
      check(ncclGroupStart(), "ncclGroupStart");
      for (int peer = 0; peer < size_; ++peer) {
        const std::size_t at = static_cast<std::size_t>(peer) * block;
        check(ncclSend(s + at, block, ncclUint8, peer, comm_, stream_), "ncclSend");
        check(ncclRecv(r + at, block, ncclUint8, peer, comm_, stream_), "ncclRecv");
      }
      check(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

 private:
  static bool on_device(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // (a plain host pointer on older runtimes: clear the error)
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }
  // Runs `collective` on device copies of send (n_send bytes) and recv
  // (n_recv bytes) when they are host memory, then waits for it.
  template <class F>
  void run(const std::byte* send, std::size_t n_send, std::byte* recv, std::size_t n_recv, F&& collective) {
    cuda(cudaSetDevice(device_), "cudaSetDevice");
    const bool send_dev = on_device(send), recv_dev = on_device(recv);
    const std::size_t need = (send_dev ? 0 : n_send) + (recv_dev ? 0 : n_recv);
    if (need > staged_) {
      if (staging_) cuda(cudaFree(staging_), "cudaFree");
      staging_ = nullptr;
      staged_ = 0;
      cuda(cudaMalloc(reinterpret_cast<void**>(&staging_), need), "cudaMalloc");
      staged_ = need;
    }
    const std::byte* s = send;
    std::byte* r = recv;
    if (!send_dev) {
      cuda(cudaMemcpyAsync(staging_, send, n_send, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
      s = staging_;
    }
    if (!recv_dev) r = staging_ + (send_dev ? 0 : n_send);
    collective(s, r);
    if (!recv_dev) cuda(cudaMemcpyAsync(recv, r, n_recv, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  static void check(ncclResult_t r, const char* call) {
    if (r != ncclSuccess) throw error(std::string("ctg: nccl_comm: ") + call + " failed: " + ncclGetErrorString(r));
  }
  static void cuda(cudaError_t e, const char* call) {
    if (e != cudaSuccess) throw error(std::string("ctg: nccl_comm: ") + call + " failed: " + cudaGetErrorString(e));
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1, device_ = 0;
  std::byte* staging_ = nullptr;  // device bytes for host buffers
  std::size_t staged_ = 0;
};

}  // namespace ctg::dist

// dist::nccl_comm on one GPU, one rank (needs a GPU: skipped without one):
// both collectives on host and on device buffers, then data parallelism over
// NCCL: three AdamW steps of a small model, bit for bit those of one process
// playing one rank (dist::emulate{1}), which is the plain store and AdamW.
#include <cstdint>
#include <cstring>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/dist/nccl_comm.hpp>

#include "device_test.hpp"

namespace {
using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
using Y = ctg::input<"y", ctg::f32, ctg::dyn, 3>;
using W1 = ctg::param<"w1", ctg::bf16, 4, 5>;
using W2 = ctg::param<"w2", ctg::f32, 5, 3>;

template <class Store>
std::vector<unsigned char> bytes_of(Store& s) {
  const auto w1 = s.param(W1{});
  const auto w2 = s.param(W2{});
  std::vector<unsigned char> out(w1.size_bytes() + w2.size_bytes());
  std::memcpy(out.data(), w1.data(), w1.size_bytes());
  std::memcpy(out.data() + w1.size_bytes(), w2.data(), w2.size_bytes());
  return out;
}

template <class Comm>
std::vector<unsigned char> train(Comm* comm, std::vector<float>& losses) {
  auto h = ctg::tanh(ctg::matmul(X{}, ctg::cast<ctg::f32>(W1{})));
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(h, W2{}) - Y{})));
  auto s = ctg::make_store(ctg::cpu::device{1}, step);
  ctg::nn::init_params(s, 3, 0.5);
  using dp_t = ctg::dist::data_parallel<decltype(s)>;
  dp_t dp = comm ? dp_t(s, *comm) : dp_t(s, ctg::dist::emulate{1});
  ctg::dist::sharded_adamw opt(dp, {.lr = 0.05f});
  std::vector<float> x(8), y(6);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i) - 0.3f;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = 0.2f * static_cast<float>(i % 3);
  for (int k = 0; k < 3; ++k) {
    step(s, ctg::feed(X{}, x, 2), ctg::feed(Y{}, y, 2));
    opt.step();
    losses.push_back(dp.loss());
  }
  return bytes_of(s);
}
}  // namespace

int main() {
  return run_device_test([](const ctg::cuda::device&) {
    bool ok = true;
    auto comm = ctg::dist::nccl_comm::single(0);
    ok = ok && comm.rank() == 0 && comm.size() == 1;
    // Host buffers (staged through the device).
    std::vector<std::uint8_t> a{1, 2, 3, 250, 7}, b(5), c(5);
    comm.all_gather(std::span<const std::uint8_t>(a), std::span(b));
    comm.all_to_all(std::span<const std::uint8_t>(a), std::span(c), 5);
    ok = ok && a == b && a == c;
    // Device buffers, used in place.
    std::uint8_t *da = nullptr, *db = nullptr;
    CTG_CUDA_CHECK(cudaMalloc(&da, 5));
    CTG_CUDA_CHECK(cudaMalloc(&db, 5));
    CTG_CUDA_CHECK(cudaMemcpy(da, a.data(), 5, cudaMemcpyHostToDevice));
    comm.all_gather(std::span<const std::uint8_t>(da, 5), std::span(db, 5));
    std::vector<std::uint8_t> back(5);
    CTG_CUDA_CHECK(cudaMemcpy(back.data(), db, 5, cudaMemcpyDeviceToHost));
    CTG_CUDA_CHECK(cudaFree(da));
    CTG_CUDA_CHECK(cudaFree(db));
    ok = ok && back == a;
    if (!ok) std::printf("FAIL: a collective on one rank did not copy its bytes\n");
    // Data parallelism over NCCL, one rank, against one process.
    std::vector<float> over_nccl, alone;
    const auto p = train(&comm, over_nccl);
    const auto q = train<ctg::dist::nccl_comm>(nullptr, alone);
    const bool same = p == q && over_nccl == alone && over_nccl.back() < over_nccl.front();
    if (!same) std::printf("FAIL: data parallelism over NCCL differs from one process\n");
    return ok && same;
  });
}

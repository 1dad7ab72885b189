// An embedding's gradient on the GPU (scatter_add: the ids sorted with their
// positions by cub's radix sort, then each run of equal ids summed by a
// thread a column: exec/cuda/scatter_runs.hpp) against the CPU store: the
// same bits, for a table of odd rows with ids repeated a thousand times, and
// for GPT-2's [50304, 768] table under bf16 autocast with 8192 ids; two
// device runs give the same bits. Row magnitudes from 2^-12 to 2^12, so
// that f32 sums in another order would give other bits.
// Without a GPU: prints why and returns 77 (ctest: skipped).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/store.cuh>

#include "device_test.hpp"

namespace {
using ctg::dim_t;
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn>;

template <class T>
std::vector<T> spread_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int> e(-12, 12);
  std::vector<T> v(n);
  for (auto& x : v) x = T(static_cast<float>(std::ldexp(u(rng), e(rng))));
  return v;
}

// The table E's gradient of sum(rows(E)[ids] * r) on the CPU and twice on
// the GPU; true when all three agree bit for bit.
// (Leaves come as arguments: nvcc's host pass cannot spell a leaf's name
// in a template argument list, README "The CUDA backend".)
template <class E, class R, class Step>
bool check(const ctg::cuda::device& dev, const char* what, Step step, E, R, const std::vector<ctg::i32>& ids,
           const std::vector<typename R::dtype>& r) {
  using T = typename E::dtype;
  const auto n = static_cast<dim_t>(ids.size());
  auto cpu = ctg::make_store(ctg::cpu::device{1}, step);
  ctg::nn::init_params(cpu, 3);
  step(cpu, ctg::feed(Ids{}, ids, n), ctg::feed(R{}, r, n));
  std::vector<T> want(E::dims::static_numel);
  cpu.download_grad(E{}, std::span<T>(want));
  bool ok = true;
  std::vector<T> first;
  for (int run = 0; run < 2; ++run) {
    auto gpu = ctg::make_store(dev, step);
    ctg::nn::init_params(gpu, 3);
    step(gpu, ctg::feed(Ids{}, ids, n), ctg::feed(R{}, r, n));
    std::vector<T> got(want.size());
    gpu.download_grad(E{}, std::span<T>(got));
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
    std::printf("%s, run %d: %zu of %zu gradient entries differ from the CPU's\n", what, run + 1, differ, got.size());
    ok = ok && differ == 0;
    if (run == 0) first = got;
    else ok = ok && std::memcmp(first.data(), got.data(), got.size() * sizeof(T)) == 0;
  }
  return ok;
}
}  // namespace

int main() {
  return run_device_test([](const ctg::cuda::device& dev) {
    bool ok = true;
    {
      // 4097 ids over 1000 rows of 37: id 3 at every other position, the rest spread.
      using E = ctg::param<"embed", ctg::f32, 1000, 37>;
      using R = ctg::input<"r", ctg::f32, ctg::dyn, 37>;
      std::vector<ctg::i32> ids(4097);
      std::mt19937 rng(1);
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = i % 2 ? 3 : static_cast<ctg::i32>(rng() % 1000);
      auto step = ctg::value_and_grad(ctg::sum(ctg::gather(E{}, Ids{}) * R{}));
      ok = check(dev, "f32 [1000, 37], 4097 ids", step, E{}, R{}, ids, spread_values<float>(ids.size() * 37, 2)) && ok;
    }
    {
      // GPT-2's table, gathered in bf16 (autocast), 8192 ids of a Zipf-like spread.
      using E = ctg::param<"embed", ctg::f32, 50304, 768>;
      using R = ctg::input<"r", ctg::bf16, ctg::dyn, 768>;
      std::vector<ctg::i32> ids(8192);
      std::mt19937 rng(4);
      for (auto& id : ids) id = static_cast<ctg::i32>(std::pow(rng() % 50304 + 1.0, 2.0) / 50304.0) % 50304;
      auto step =
          ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(ctg::gather(ctg::cast<ctg::bf16>(E{}), Ids{}) * R{})));
      ok = check(dev, "bf16 rows into f32 [50304, 768], 8192 ids", step, E{}, R{}, ids,
                 spread_values<ctg::bf16>(ids.size() * 768, 5)) &&
           ok;
    }
    return ok;
  });
}

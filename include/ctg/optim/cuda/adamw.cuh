#pragma once
// AdamW on a CUDA store (exec/cuda/store.cuh): optim::adamw for a store on
// cuda::backend, so the same line trains on either device:
//
//   auto store = ctg::make_store(gpu, step);
//   ctg::nn::init_params(store, seed);
//   ctg::optim::adamw opt(store, {.lr = 3e-4f});   // moments and f32 masters
//   on the GPU step(store, feeds...);  float grad_norm = opt.step(store);
//
// The update is optim::adamw's (adamw.hpp): the same coefficients, rounded
// on the host, the same per-element operations in f32 in PyTorch's order
// (compiled with --fmad=false, so no multiply-add is fused: the bits of
// the CPU's update where the CPU fuses none either), the same clipping and
// the same errors. Every pass is a kernel on the store's stream:
//   1. per leaf, the sum of squares of its gradient in f64 (a grid fixed by
//      the leaf's size, CUB's block sums, then the blocks' sums folded in a
//      fixed order: the same bits every run, on every GPU), its first
//      element that is not finite, and (a leaf with an f32 master) its first
//      element that no longer holds its master's rounding;
//   2. one copy of those to the host: the step's one wait. A gradient that is
//      not finite, or a parameter written since the last update, throws
//      ctg::error naming the leaf and the element, and nothing has changed;
//   3. per leaf, the update, in place.
// Its state stays on the GPU; a checkpoint (io::save / io::load with the
// optimizer) copies it through the host into the CPU optimizer's records, so
// a checkpoint moves between devices.
#include <array>
#include <cmath>
#include <type_traits>
#include <cstdint>
#include <span>
#include <ctg/exec/cuda/launch_geometry.hpp>
#include <ctg/exec/cuda/store.cuh>
#include <ctg/optim/adamw.hpp>
#include <cub/block/block_reduce.cuh>
#include <vector>

namespace ctg::cuda::kernels {

inline constexpr unsigned adamw_threads = 256;
// A leaf's check runs on a grid fixed by its size alone (so its sum's bits
// are the same on every GPU): a block per 2048 elements (8 a thread), at
// most adamw_check_blocks, about an H100's or H200's resident threads. (A
// grid of 64 blocks read GPT-2's 38.6 M-element embedding gradient with
// 16384 threads, on 64 of 132 SMs.)
inline constexpr unsigned adamw_check_blocks = 1024;
constexpr unsigned adamw_check_blocks_for(dim_t n) {
  return blocks_up_to(static_cast<std::size_t>(n), adamw_threads, 8, adamw_check_blocks);
}

// Leaf k's gradient (T) and parameter: partial[block] = the block's sum of
// g^2 in f64 (the leaf's adamw_check_blocks slots, zeroed before: blocks
// beyond its grid leave theirs 0); first[k] = the first element of g that
// is not finite; written[k] = the first parameter element that is not its
// master's rounding.
template <class Ts, bool HasMaster>  // <T>
__global__ void __launch_bounds__(adamw_threads)
    adamw_check(const type_at<Ts, 0>* g, const type_at<Ts, 0>* param, const float* master, dim_t n, double* partial,
                unsigned long long* first, unsigned long long* written) {
  using T = type_at<Ts, 0>;
  using reduce = cub::BlockReduce<double, adamw_threads>;
  __shared__ typename reduce::TempStorage temp;
  double sum = 0;
  for (dim_t i = blockIdx.x * dim_t{blockDim.x} + threadIdx.x; i < n; i += dim_t{gridDim.x} * blockDim.x) {
    const double x = static_cast<double>(load_as<T>(g[i]));
    if (!isfinite(x)) atomicMin(first, static_cast<unsigned long long>(i));
    sum += x * x;
    if constexpr (HasMaster) {
      const float a = static_cast<float>(load_as<T>(param[i]));
      const float b = sizeof(T) > sizeof(float) ? master[i] : static_cast<float>(load_as<T>(store_as<T>(master[i])));
      if (!(a == b || (a != a && b != b))) atomicMin(written, static_cast<unsigned long long>(i));
    }
  }
  const double block = reduce(temp).Sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = block;
}

// sums[k] = leaf k's adamw_check_blocks partials added in a fixed order
// (thread t: slots t, t + threads, ...; then the block's sum): one block a leaf.
template <int = 0>
__global__ void __launch_bounds__(adamw_threads) adamw_fold(const double* partials, double* sums) {
  using reduce = cub::BlockReduce<double, adamw_threads>;
  __shared__ typename reduce::TempStorage temp;
  const double* mine = partials + std::size_t{blockIdx.x} * adamw_check_blocks;
  double sum = 0;
  for (unsigned b = threadIdx.x; b < adamw_check_blocks; b += adamw_threads) sum += mine[b];
  const double leaf = reduce(temp).Sum(sum);
  if (threadIdx.x == 0) sums[blockIdx.x] = leaf;
}

// One leaf's update (detail::adamw_update's operations, one element per
// thread).
template <class Ts, bool HasMaster>  // <T>
__global__ void adamw_update(const type_at<Ts, 0>* g, float* w, float* m, float* v, type_at<Ts, 0>* param, dim_t n,
                             ctg::detail::adamw_coeffs c) {
  using T = type_at<Ts, 0>;
  for (dim_t i = blockIdx.x * dim_t{blockDim.x} + threadIdx.x; i < n; i += dim_t{gridDim.x} * blockDim.x) {
    const float gi = static_cast<float>(load_as<T>(g[i])) * c.grad_scale;
    m[i] = m[i] * c.beta1 + c.one_minus_beta1 * gi;
    v[i] = v[i] * c.beta2 + (c.one_minus_beta2 * gi) * gi;
    const float denom = sqrtf(v[i]) / c.bias_correction2_sqrt + c.eps;
    w[i] = w[i] * c.decay + (c.neg_step_size * m[i]) / denom;
    if constexpr (HasMaster) param[i] = store_as<T>(w[i]);
  }
}

// master = param, widened.
template <class Ts>  // <T>
__global__ void take_master(const type_at<Ts, 0>* param, float* master, dim_t n) {
  for (dim_t i = blockIdx.x * dim_t{blockDim.x} + threadIdx.x; i < n; i += dim_t{gridDim.x} * blockDim.x)
    master[i] = static_cast<float>(load_as<type_at<Ts, 0>>(param[i]));
}

}  // namespace ctg::cuda::kernels

namespace ctg::optim {

// A store on the CUDA backend (basic_store, or a shared_store over one).
template <class Store>
concept cuda_store = step_store<Store> && std::is_same_v<typename Store::backend_type, cuda::backend>;

template <step_store Store>
  requires cuda_store<Store>
class adamw<Store> : public detail::adamw_counters {
 public:
  using store_type = Store;
  using step_type = typename store_type::step_type;
  using trainable = typename step_type::wrt;

  explicit adamw(store_type& s, adamw_config cfg = {}) : adamw_counters(cfg), stream_(s.workspace().stream()) {
    static_assert(trainable::size > 0, "ctg: adamw needs a step with trainable leaves (value_and_grad)");
    state_.reserve(layout.total * sizeof(float) + 64);  // (zero-filled: moments start at 0)
    checks_.reserve(partials_offset + nt * check_blocks * sizeof(double));
    bind_to(s);
    sync_masters(s);
  }

  float step(store_type& s) { return step(s, cfg_.lr); }

  float step(store_type& s, float lr) {
    check_store(s);
    const auto alone = s.hold_alone();  // (no step runs meanwhile)
    ctg::detail::check_adamw_lr(lr);
    detail::check_adamw_grads_complete(s);
    cuda::workspace& ws = s.workspace();
    const cudaStream_t stream = ws.stream();
    // Pass 1: read only.
    auto* r = reinterpret_cast<check_results*>(checks_.data());
    double* partials = this->partials();
    CTG_CUDA_CHECK(cudaMemsetAsync(r->first, 0xFF, sizeof r->first + sizeof r->written, stream));
    CTG_CUDA_CHECK(cudaMemsetAsync(partials, 0, nt * check_blocks * sizeof(double), stream));
    tl::for_each_indexed<trainable>([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      constexpr bool master = detail::has_master_copy<T>;
      constexpr unsigned blocks = cuda::kernels::adamw_check_blocks_for(numel<L>());
      cuda::kernels::adamw_check<tl::list<T>, master><<<blocks, kernels_threads, 0, stream>>>(
          this->template grad_of<L>(s), this->template param_of<L>(s), master ? state(layout.master[K]) : nullptr,
          this->template numel<L>(), partials + K * check_blocks, r->first + K, r->written + K);
      cuda::check_launch("ctg::cuda::kernels::adamw_check");
    });
    cuda::kernels::adamw_fold<><<<static_cast<unsigned>(nt), kernels_threads, 0, stream>>>(partials, r->sums);
    cuda::check_launch("ctg::cuda::kernels::adamw_fold");
    check_results h;
    CTG_CUDA_CHECK(cudaMemcpyAsync(&h, r, sizeof h, cudaMemcpyDeviceToHost, stream));
    CTG_CUDA_CHECK(cudaStreamSynchronize(stream));
    double total_sq = 0.0;
    tl::for_each_indexed<trainable>([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      if (h.first[K] != none)
        detail::throw_adamw_not_finite(L::name.c_str(), h.first[K],
                                       this->template element<T>(ws, this->template grad_of<L>(s), h.first[K]));
      const double ss = h.sums[K];
      if (!std::isfinite(ss)) detail::throw_adamw_norm_overflow(L::name.c_str());
      total_sq += ss;
      if constexpr (detail::has_master_copy<T>)
        if (h.written[K] != none) {
          float w = 0;
          cuda::backend::download(ws, &w, reinterpret_cast<const std::byte*>(state(layout.master[K]) + h.written[K]),
                                  sizeof w);
          detail::throw_adamw_master_written(
              L::name.c_str(), h.written[K], this->template element<T>(ws, this->template param_of<L>(s), h.written[K]),
              w);
        }
    });
    if (!std::isfinite(total_sq))
      throw error(
          "ctg: adamw: the global gradient norm overflows; nothing was "
          "updated");
    const float total = static_cast<float>(std::sqrt(total_sq));

    // Pass 2: nothing below throws but a failed launch.
    const std::int64_t t = steps_ + 1;
    const detail::adamw_coeffs step_coeffs = detail::adamw_coeffs_for(cfg_, lr, t, total);
    tl::for_each_indexed<trainable>([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      constexpr bool master = detail::has_master_copy<T>;
      const auto c = detail::adamw_coeffs_of_leaf<typename step_type::nodes, L>(step_coeffs, cfg_);
      float* w = master ? state(layout.master[K]) : reinterpret_cast<float*>(this->template param_of<L>(s));
      const dim_t n = this->template numel<L>();
      if (n == 0) return;
      cuda::kernels::adamw_update<tl::list<T>, master>
          <<<ws.dev().blocks_for(static_cast<std::size_t>(n), kernels_threads), kernels_threads, 0, stream>>>(
              this->template grad_of<L>(s), w, state(layout.exp_avg[K]), state(layout.exp_avg_sq[K]),
              this->template param_of<L>(s), n, c);
      cuda::check_launch("ctg::cuda::kernels::adamw_update");
    });
    steps_ = t;
    s.consume_grads();
    return total;
  }

  // Re-take every master from the store's parameters (after writing them).
  void sync_masters(store_type& s) {
    check_store(s);
    const auto alone = s.hold_alone();  // (no step runs meanwhile)
    cuda::workspace& ws = s.workspace();
    tl::for_each_indexed<trainable>([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      if constexpr (detail::has_master_copy<T>) {
        const dim_t n = this->template numel<L>();
        if (n == 0) return;
        cuda::kernels::take_master<tl::list<T>>
            <<<ws.dev().blocks_for(static_cast<std::size_t>(n), kernels_threads), kernels_threads, 0, ws.stream()>>>(
                this->template param_of<L>(s), state(layout.master[K]), n);
        cuda::check_launch("ctg::cuda::kernels::take_master");
      }
    });
  }

  // The checkpoint hook (ctg/io/checkpoint.hpp): the CPU optimizer's
  // records (per leaf "master" for non-f32 leaves, "exp_avg", "exp_avg_sq";
  // then the scalars), each copied from and back to the GPU.
  template <class Records>
  void state_records(Records& r) {
    describe_state(*this, r);
  }
  template <class Records>
  void state_records(Records& r) const {
    describe_state(*this, r);
  }

  // Copies of the state to the host (tests, inspection): one leaf's moments or
  // master.
  template <class L>
  std::vector<float> download_exp_avg(store_type& s) {
    return download_state<L>(s, layout.exp_avg);
  }
  template <class L>
  std::vector<float> download_exp_avg_sq(store_type& s) {
    return download_state<L>(s, layout.exp_avg_sq);
  }

 private:
  static constexpr auto layout = detail::adamw_state_layout<trainable>();
  static constexpr std::size_t nt = trainable::size > 0 ? trainable::size : 1;
  static constexpr unsigned check_blocks = cuda::kernels::adamw_check_blocks,
                            kernels_threads = cuda::kernels::adamw_threads;
  static constexpr unsigned long long none = ~0ull;
  // What pass 1 gives the host (one copy); the blocks' partial sums follow it on the device.
  struct check_results {
    double sums[nt];
    unsigned long long first[nt], written[nt];
  };
  static constexpr std::size_t partials_offset = (sizeof(check_results) + 255) / 256 * 256;
  double* partials() const { return reinterpret_cast<double*>(checks_.data() + partials_offset); }

  template <class L>
  static constexpr dim_t numel() {
    return static_cast<dim_t>(L::dims::static_numel);
  }
  template <class L>
  static typename L::dtype* param_of(store_type& s) {
    return reinterpret_cast<typename L::dtype*>(s.template leaf_bytes<L>());
  }
  template <class L>
  static const typename L::dtype* grad_of(store_type& s) {
    return reinterpret_cast<const typename L::dtype*>(s.template grad_bytes<L>());
  }
  float* state(std::size_t offset) const { return reinterpret_cast<float*>(state_.data()) + offset; }

  template <class Self, class Records>
  static void describe_state(Self& self, Records& r) {
    tl::for_each_indexed<trainable>([&]<std::size_t K, class L>() {
      if constexpr (detail::has_master_copy<typename L::dtype>) device_record<"master", L>(self, r, layout.master[K]);
      device_record<"exp_avg", L>(self, r, layout.exp_avg[K]);
      device_record<"exp_avg_sq", L>(self, r, layout.exp_avg_sq[K]);
    });
    scalar_records(self, r);
  }
  // L's state at `offset`, as a record of kind Kind through a host copy.
  template <fixed_string Kind, class L, class Self, class Records>
  static void device_record(Self& self, Records& r, std::size_t offset) {
    float* at = self.state(offset);
    const cudaStream_t stream = self.stream_;
    r.template copied_leaf<Kind, L, float>(
        static_cast<std::size_t>(numel<L>()),
        [&](std::span<float> host) { copy_and_wait(stream, host.data(), at, host.size_bytes(), cudaMemcpyDeviceToHost); },
        [stream, at](std::span<const float> host) {
          copy_and_wait(stream, at, host.data(), host.size_bytes(), cudaMemcpyHostToDevice);
        });
  }
  static void copy_and_wait(cudaStream_t stream, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return;
    CTG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
    CTG_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  // One element in device memory, for an error message.
  template <class T>
  static double element(cuda::workspace& ws, const T* p, std::size_t i) {
    T x{};
    cuda::backend::download(ws, &x, reinterpret_cast<const std::byte*>(p + i), sizeof x);
    return static_cast<double>(load_as(x));
  }
  template <class L, class Offsets>
  std::vector<float> download_state(store_type& s, const Offsets& offsets) {
    std::vector<float> out(static_cast<std::size_t>(this->template numel<L>()));
    cuda::backend::download(s.workspace(), out.data(),
                            reinterpret_cast<const std::byte*>(state(offsets[tl::index_of<L, trainable>::value])),
                            out.size() * sizeof(float));
    return out;
  }

  cuda::arena state_, checks_;
  cudaStream_t stream_;  // the store's
};

}  // namespace ctg::optim

#pragma once
// The CPU backend: host memory, memcpy, and one runner per group kind, as
// free functions (exec/cpu/{fused_loop,matmul,index_ops,quantize}.hpp). The
// store itself is the backend-neutral basic_store (exec/store.hpp).
//
//   ctg::cpu::device dev;                      // threads: the hardware's
//   auto store = ctg::make_store(dev, step);   // params, grads, scratch
//   float loss = step(store, ctg::feed<X>(x, batch));
//   auto one = ctg::make_store(ctg::cpu::device{1}, step);  // one thread: the same bits
//
// Threads: a store runs each group on its device's threads (a pool owned by
// its workspace, shared with the stores it drives). GEMMs split their
// output, fused loops their elements or rows, reductions over other axes
// their output columns; no sum is ever split, so a step's results are bit
// for bit the same with any number of threads.
#include <chrono>
#include <cstring>
#include <memory>
#include <new>

#include <ctg/core/fp8_scaling.hpp>
#include <ctg/exec/cpu/attention.hpp>
#include <ctg/exec/cpu/fused_loop.hpp>
#include <ctg/exec/cpu/index_ops.hpp>
#include <ctg/exec/cpu/matmul.hpp>
#include <ctg/exec/cpu/quantize.hpp>
#include <ctg/exec/cpu/thread_pool.hpp>
#include <ctg/exec/cpu/workspace.hpp>
#include <ctg/exec/invalid_store.hpp>
#include <ctg/exec/store.hpp>

namespace ctg {
namespace cpu {

// The CPU: how many threads a store runs its groups on (0: the hardware's).
struct device {
  unsigned threads = 0;
  unsigned thread_count() const { return threads ? threads : hardware_threads(); }
};

// 64-byte aligned bytes, zero-filled when grown, never shrunk.
class arena {
 public:
  std::byte* data() { return mem_.get(); }
  const std::byte* data() const { return mem_.get(); }
  std::size_t size() const { return size_; }
  void reserve(std::size_t bytes) {
    if (bytes <= size_) return;
    mem_.reset(new (std::align_val_t{64}) std::byte[bytes]);
    std::memset(mem_.get(), 0, bytes);
    size_ = bytes;
  }

 private:
  struct deleter {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte[], deleter> mem_;
  std::size_t size_ = 0;
};

// Group profiling's clock (exec/group_profile.hpp): a CPU group is done
// when its runner returns.
struct group_clock {
  using mark = std::chrono::steady_clock::time_point;
  mark now(workspace&) const { return std::chrono::steady_clock::now(); }
  double seconds(mark from, mark to) const { return std::chrono::duration<double>(to - from).count(); }
  void reuse() {}
};

struct backend {
  static constexpr bool host_memory = true;
  static constexpr bool replays_launches = false;
  using arena = cpu::arena;
  using workspace = cpu::workspace;
  using group_clock = cpu::group_clock;

  static void copy(workspace&, std::byte* dst, const std::byte* src, std::size_t bytes) {
    if (bytes) std::memmove(dst, src, bytes);
  }
  static void upload(workspace&, std::byte* dst, const void* src, std::size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  static void download(workspace&, void* dst, const std::byte* src, std::size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  // A fed input is read where it is.
  static std::byte* bind_input(workspace&, const void* fed, std::size_t, arena&) {
    return const_cast<std::byte*>(static_cast<const std::byte*>(fed));
  }

  // The runner of group R of step Key, instantiated on name-free types
  // (dtypes, flags, a fused group's plan): steps share them.
  template <class Key, std::size_t R>
  static consteval runner_t<workspace> runner_for() {
    using node = tl::at_t<R, typename step_of<Key>::nodes>;
    using T = typename node::dtype;
    using C0 = detail::child_dtype_t<Key, R, 0>;
    using C1 = detail::child_dtype_t<Key, R, 1>;
    if constexpr (node::kind == node_kind::stack || node::kind == node_kind::stack_grad) {
      return nullptr;
    } else if constexpr (node::kind == node_kind::matmul) {
      if constexpr (node::sum_batches) return &run_summed_matmul<C0, C1, T, node::transpose_a, node::transpose_b>;
      else return &run_matmul<C0, C1, T, node::transpose_a, node::transpose_b>;
    } else if constexpr (node::kind == node_kind::fp8_matmul) {
      return &run_fp8_matmul<C0, C1, T, node::transpose_a, node::transpose_b, node::sum_batches>;
    } else if constexpr (node::kind == node_kind::transpose) {
      return &run_transpose<T>;
    } else if constexpr (node::kind == node_kind::gather) {
      return &run_gather<T>;
    } else if constexpr (node::kind == node_kind::scatter_add) {
      return &run_scatter_add<T, C0>;
    } else if constexpr (node::kind == node_kind::quantize) {
      return &run_quantize<C0, T, node::scaling::is_delayed, node::scaling::margin>;
    } else if constexpr (node::kind == node_kind::dequantize) {
      return &run_dequantize<C0, T>;
    } else if constexpr (node::kind == node_kind::attention) {
      if constexpr (node::pass == attention_pass::lse) return &run_attention_lse<C0, T, node::layout>;
      else if constexpr (node::pass == attention_pass::output) return &run_attention<T, compute_t<T>, node::layout>;
      else return &run_attention_grad<T, compute_t<T>, node::layout>;
    } else {
      return &run_fused<kernel::fused_plan_t<Key, R>>;
    }
  }
  // The scratch a runner needs beyond its buffers, reserved before a step:
  // a reduction over other axes' accumulators. (A GEMM's packing buffers
  // and an fp8 product's widened operands grow on their first use.)
  template <class Key, std::size_t R>
  static consteval bool needs_scratch() {
    using node = tl::at_t<R, typename step_of<Key>::nodes>;
    if constexpr (detail::kind_info_of(node::kind).runs_alone) return false;
    else return kernel::fused_plan_t<Key, R>::loop == loop_kind::axis_reduce;
  }
  template <class Key, std::size_t R>
  static consteval scratch_sizer_t<workspace> scratch_for() {
    if constexpr (needs_scratch<Key, R>()) return &reserve_axis_reduce;
    else return nullptr;
  }
  // Gradient accumulation: dst += src, in T's compute type, rounded once to T.
  template <class T>
  static void accumulate(workspace&, std::byte* dst, const std::byte* src, std::size_t n) {
    T* d = reinterpret_cast<T*>(dst);
    const T* a = reinterpret_cast<const T*>(src);
    for (std::size_t i = 0; i < n; ++i) d[i] = store_as<T>(load_as<T>(d[i]) + load_as<T>(a[i]));
  }
  static void write_value(workspace&, std::byte* dst, const std::byte* bytes, std::size_t n) { std::memcpy(dst, bytes, n); }
  // FP8 delayed scaling's bookkeeping (exec/fp8_state.hpp), layer by layer.
  static void fold_amaxes(workspace&, const amax_fold& f) {
    for (std::size_t l = 0; l < f.layers; ++l) f.run_layer(l);
  }
  static void update_fp8(workspace&, const fp8_update& u) {
    for (std::size_t l = 0; l < u.layers; ++l) u.run_layer(l);
  }
};

template <class Step>
using store = basic_store<backend, step_key_t<Step>>;

// Group R of a step (or key) on bindings filled by hand: what a store runs
// at that position (the device tests' host reference).
template <class Step, std::size_t R, std::size_t N>
void run_group(const bindings<N>& b, workspace& ws, float* amax = nullptr) {
  using K = step_key_t<step_of<Step>>;
  // (needs_scratch, not the pointer against nullptr: g++ 12 with
  // -fsanitize=undefined takes no function's address for a constant.)
  if constexpr (backend::needs_scratch<K, R>()) backend::scratch_for<K, R>()(group_call_of<K, R>(), b.view(), ws);
  backend::runner_for<K, R>()(group_call_of<K, R>(), b.view(), ws, amax);
}

}  // namespace cpu

template <class Root, class Wrt, bool Fuse>
cpu::store<graph_step<Root, Wrt, Fuse>> make_store(cpu::device dev, graph_step<Root, Wrt, Fuse>) {
  cpu::store<graph_step<Root, Wrt, Fuse>> s;
  s.workspace().use(dev);
  return s;
}
// After a failed check (already reported), add no errors of its own.
inline invalid_store make_store(cpu::device, invalid_step) { return {}; }

}  // namespace ctg

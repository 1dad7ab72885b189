#pragma once
// The CUDA backend: device memory, copies ordered on the device's stream,
// and one runner per group kind; the store itself is the backend-neutral
// basic_store (exec/store.hpp), the same one the CPU runs.
//
//   ctg::cuda::device gpu;                       // device 0 and its stream (outlives the store)
//   auto store = ctg::make_store(gpu, step);     // params, grads, FP8 state and scratch on the GPU
//   ctg::nn::init_params(store, seed);           // made on the host, uploaded
//   float loss = step(store, ctg::feed<Ids>(ids, b, t), ...);  // host spans copied in, device spans read in place
//   store.download(W{}, host);  store.download_grad(W{}, host);  // explicit copies
//
// The host cannot read a GPU's memory: store.param<L>() and store.grad<L>()
// do not compile on this store (a ctg: message says what to use instead).
//
// Runners:
//   * fused groups: exec/cuda/fused_kernel.cuh (one kernel per group);
//   * matmul, fp8_matmul: a GEMM plan (exec/cuda/gemm_plan.hpp, host code
//     tested on the CPU) run by cuBLASLt (exec/cuda/gemm.cuh); operands of
//     two dtypes multiply in the wider one (the narrower widened first);
//   * transpose, gather, scatter_add, quantize, dequantize:
//     exec/cuda/data_kernels.cuh.
// Everything stays on the stream (FP8 amaxes too: exec/fp8_state.hpp), and
// a step's one wait is for its loss.
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cub/device/device_radix_sort.cuh>

#include <ctg/exec/cuda/attention_kernels.cuh>
#include <ctg/exec/cuda/attention_mma_kernels.cuh>
#include <ctg/exec/cuda/data_kernels.cuh>
#include <ctg/exec/cuda/fused_kernel.cuh>
#include <ctg/exec/cuda/gemm.cuh>
#include <ctg/exec/cuda/group_clock.cuh>
#include <ctg/exec/cuda/workspace.cuh>
#include <ctg/exec/group_layout.hpp>
#include <ctg/exec/invalid_store.hpp>
#include <ctg/exec/store.hpp>

namespace ctg {
namespace cuda {

namespace runners {
inline constexpr unsigned threads = 256;

template <class Plan>
void run_fused(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  typename Plan::context c;
  const auto layout = ctg::detail::group_layout<Plan>(g, b, c);
  auto* out = b.template as<typename Plan::dtype>(g.root);
  if constexpr (Plan::loop == loop_kind::axis_reduce)
    launch_axis_reduce<Plan>(ws.dev(), c, layout, b.shape[g.iteration], b.shape[g.root], out, ws.reduce_partials());
  else
    launch_fused<Plan>(ws.dev(), c, layout, ctg::detail::group_outputs_of<Plan>(g, b));
}

// The scratch of a product's operand that is widened (below): one W per element.
template <class W>
std::size_t widened_operand_bytes(const bindings_view& b, std::size_t node) {
  return static_cast<std::size_t>(b.shape[node].numel()) * sizeof(W) + 1;
}
// A product of operands of two dtypes (backend::scratch_for): the narrower one's widened copy (operands of two
// dtypes multiply in the wider one: dtype rules).
template <class TA, class TB>
void reserve_matmul(const group_call& g, const bindings_view& b, workspace& ws) {
  using W = promote_t<TA, TB>;
  if constexpr (!std::is_same_v<TA, W>) ws.operand_scratch(0).reserve(widened_operand_bytes<W>(b, g.child[0]));
  if constexpr (!std::is_same_v<TB, W>) ws.operand_scratch(1).reserve(widened_operand_bytes<W>(b, g.child[1]));
}

// Operand `which` (0: A, 1: B) of a product in type W: in place, or (a
// narrower operand: cuBLASLt multiplies operands of one type) widened into scratch.
template <class From, class W>
const void* operand_as(const bindings_view& b, std::size_t node, int which, workspace& ws) {
  if constexpr (std::is_same_v<From, W>) {
    return b.buf[node];
  } else {
    const dim_t n = b.shape[node].numel();
    std::byte* scratch =
        take_reserved(ws.operand_scratch(which), widened_operand_bytes<W>(b, node), "a product's widened operand");
    if (n > 0) {
      const From* in = b.template as<const From>(node);
      W* out = reinterpret_cast<W*>(scratch);
      const dim_t width = flat_width(n, in, out);
      kernels::widen<tl::list<From, W>><<<ws.dev().blocks_for(flat_work(n, width), threads), threads, 0, ws.stream()>>>(
          in, out, n, width);
      check_launch("ctg::cuda::kernels::widen");
    }
    return scratch;
  }
}

// C = op(A) op(B); SumBatches: C [M, N] (f32, or f64) is the sum of the batches' products (gemm_plan.hpp).
template <class TA, class TB, class TC, bool TransposeA, bool TransposeB, bool SumBatches>
void run_matmul(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const std::size_t ia = g.child[0], ib = g.child[1], r = g.root;
  using W = promote_t<TA, TB>;
  const gemm_plan p = plan_gemm(b.shape[ia], b.shape[ib], b.shape[r], gemm_type_of<W>(), gemm_type_of<W>(),
                                gemm_type_of<TC>(), false, TransposeA, TransposeB, SumBatches);
  ws.gemm().run(p, {operand_as<TA, W>(b, ia, 0, ws), operand_as<TB, W>(b, ib, 1, ws), b.buf[r], nullptr, nullptr,
                    nullptr, nullptr});
}

// The payloads multiplied by cuBLASLt FP8, scaled by scale_inv(A) * scale_inv(B)
// (the quantized buffers' side data) and rounded once to the result type;
// SumBatches: summed over the batches (gemm_plan.hpp).
template <class QA, class QB, class TC, bool TransposeA, bool TransposeB, bool SumBatches>
gemm_plan plan_fp8_matmul(const group_call& g, const bindings_view& b) {
  return plan_gemm(b.shape[g.child[0]], b.shape[g.child[1]], b.shape[g.root], gemm_type_of<QA>(), gemm_type_of<QB>(),
                   gemm_type_of<TC>(), true, TransposeA, TransposeB, SumBatches);
}
// (backend::scratch_for) The operands' transposed copies its plan asks for (FP8 products take K-major operands).
template <class QA, class QB, class TC, bool TransposeA, bool TransposeB, bool SumBatches>
void reserve_fp8_matmul(const group_call& g, const bindings_view& b, workspace& ws) {
  const gemm_plan p = plan_fp8_matmul<QA, QB, TC, TransposeA, TransposeB, SumBatches>(g, b);
  ws.operand_scratch(0).reserve(static_cast<std::size_t>(p.scratch_a) + 1);
  ws.operand_scratch(1).reserve(static_cast<std::size_t>(p.scratch_b) + 1);
}
template <class QA, class QB, class TC, bool TransposeA, bool TransposeB, bool SumBatches>
void run_fp8_matmul(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const std::size_t ia = g.child[0], ib = g.child[1], r = g.root;
  const gemm_plan p = plan_fp8_matmul<QA, QB, TC, TransposeA, TransposeB, SumBatches>(g, b);
  std::byte* at = take_reserved(ws.operand_scratch(0), static_cast<std::size_t>(p.scratch_a) + 1,
                                "an FP8 product's transposed operand A");
  std::byte* bt = take_reserved(ws.operand_scratch(1), static_cast<std::size_t>(p.scratch_b) + 1,
                                "an FP8 product's transposed operand B");
  ws.gemm().run(p, {b.buf[ia], b.buf[ib], b.buf[r], at, bt, &fp8_side(b, ia)->scale_inv, &fp8_side(b, ib)->scale_inv});
}

template <class T>
void run_transpose(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const rt_shape& s = b.shape[g.child[0]];
  const dim_t rows = s.d[s.rank - 2], cols = s.d[s.rank - 1], total = s.numel();
  if (total == 0) return;
  launch_transpose(ws.dev(), b.template as<const T>(g.child[0]), b.template as<T>(g.root), rows, cols,
                   total / (rows * cols));
}

template <class T>
void run_gather(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const rt_shape& ts = b.shape[g.child[0]];
  const dim_t rows = ts.d[0], row_len = rows ? ts.numel() / rows : 0;
  const dim_t total = b.shape[g.child[1]].numel() * row_len;
  if (total == 0) return;
  kernels::gather<tl::list<T>><<<ws.dev().blocks_for(static_cast<std::size_t>(total), threads), threads, 0, ws.stream()>>>(
      b.template as<const T>(g.child[0]), b.template as<const i32>(g.child[1]), b.template as<T>(g.root), row_len,
      total);
  check_launch("ctg::cuda::kernels::gather");
}

// Where the sort of n ids in [0, rows) lies in scatter_add's scratch (cub's
// temporary storage as its radix sort asks for it: a host query).
inline scatter_sort_layout scatter_sort_for(dim_t n, dim_t rows, cudaStream_t stream) {
  std::size_t temp_bytes = 0;
  CTG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
      static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), static_cast<int>(n), 0,
      id_bits(rows), stream));
  return scatter_sort_layout(static_cast<std::size_t>(n), temp_bytes);
}
// (backend::scratch_for) The sort of its ids.
inline void reserve_scatter_add(const group_call& g, const bindings_view& b, workspace& ws) {
  const dim_t n = b.shape[g.child[1]].numel();
  if (n == 0 || n > dim_t{INT32_MAX}) return;  // (nothing to sort; too many: the runner says so)
  ws.index_sort().reserve(scatter_sort_for(n, b.shape[g.root].d[0], ws.stream()).bytes);
}

// The ids sorted with their positions (stable: cub's radix sort, on the ids'
// low bits as unsigned: they were checked to lie in [0, rows)), then each
// run of equal ids summed (exec/cuda/scatter_runs.hpp).
template <class TO, class TG>
void run_scatter_add(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const rt_shape& os = b.shape[g.root];
  const dim_t rows = os.d[0], row_len = rows ? os.numel() / rows : 0;
  CTG_CUDA_CHECK(cudaMemsetAsync(b.buf[g.root], 0, static_cast<std::size_t>(os.numel()) * sizeof(TO), ws.stream()));
  const dim_t n = b.shape[g.child[1]].numel();
  if (row_len == 0 || n == 0) return;
  if (n > dim_t{INT32_MAX}) throw error("ctg: scatter_add on a GPU takes at most 2^31 - 1 ids");
  using key = std::uint32_t;
  const auto* ids = reinterpret_cast<const key*>(b.template as<const i32>(g.child[1]));
  const scatter_sort_layout at = scatter_sort_for(n, rows, ws.stream());
  std::byte* base = take_reserved(ws.index_sort(), at.bytes, "scatter_add's sort of its ids");
  auto* positions = reinterpret_cast<std::int32_t*>(base + at.positions);
  auto* sorted_ids = reinterpret_cast<key*>(base + at.sorted_ids);
  auto* sorted_positions = reinterpret_cast<std::int32_t*>(base + at.sorted_positions);
  kernels::positions<><<<ws.dev().blocks_for(static_cast<std::size_t>(n), threads), threads, 0, ws.stream()>>>(positions,
                                                                                                             n);
  check_launch("ctg::cuda::kernels::positions");
  std::size_t temp_bytes = at.temp_bytes;
  CTG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + at.temp, temp_bytes, ids, sorted_ids, positions,
                                                 sorted_positions, static_cast<int>(n), 0, id_bits(rows), ws.stream()));
  kernels::scatter_add_runs<tl::list<TO, TG>>
      <<<ws.dev().blocks_for(static_cast<std::size_t>(n) * threads, threads), threads, 0, ws.stream()>>>(
          reinterpret_cast<const std::int32_t*>(sorted_ids), sorted_positions, n,
          b.template as<const TG>(g.child[0]), row_len, b.template as<TO>(g.root));
  check_launch("ctg::cuda::kernels::scatter_add_runs");
}

// Fused attention (graph/attention.hpp): bf16 and f16 heads of a multiple
// of 16 features up to 128 on tensor cores, 64 rows a block of 128 threads,
// the tiles in dynamic shared memory (exec/cuda/attention_mma_kernels.cuh);
// the rest on CUDA cores, attention_tiles::rows_for(F) rows a block, a
// thread each, static tiles (exec/cuda/attention_kernels.cuh). Both kinds
// take the same arguments.
template <class T, int F, bool TensorCores = attention_mma_tiles::takes<T>(F)>
struct attention_kernels {
  using Ts = tl::list<T, compute_t<T>>;
  static constexpr int rows = attention_tiles::rows_for(F, sizeof(compute_t<T>)), threads = rows;
  static constexpr auto lse = &kernels::attention_lse<Ts, F>;
  static constexpr auto out = &kernels::attention_out<Ts, F>;
  static constexpr auto dq = &kernels::attention_dq<Ts, F>;
  static constexpr auto dkv = &kernels::attention_dkv<Ts, F>;
  static constexpr std::size_t shared[4] = {0, 0, 0, 0};
  static constexpr const char* names[4] = {"ctg::cuda::kernels::attention_lse", "ctg::cuda::kernels::attention_out",
                                           "ctg::cuda::kernels::attention_dq", "ctg::cuda::kernels::attention_dkv"};
};
template <class T, int F>
struct attention_kernels<T, F, true> {
  using Ts = tl::list<T, compute_t<T>>;
  using tiles = attention_mma_tiles;
  static constexpr int rows = tiles::block_rows, threads = tiles::threads;
  static constexpr auto lse = &kernels::attention_lse_tc<Ts, F>;
  static constexpr auto out = &kernels::attention_out_tc<Ts, F>;
  static constexpr auto dq = &kernels::attention_dq_tc<Ts, F>;
  static constexpr auto dkv = &kernels::attention_dkv_tc<Ts, F>;
  static constexpr std::size_t shared[4] = {
      tiles::shared_bytes(tiles::lse_tiles, F), tiles::shared_bytes(tiles::out_tiles, F),
      tiles::shared_bytes(tiles::dq_tiles, F), tiles::shared_bytes(tiles::dkv_tiles, F)};
  static constexpr const char* names[4] = {
      "ctg::cuda::kernels::attention_lse_tc", "ctg::cuda::kernels::attention_out_tc",
      "ctg::cuda::kernels::attention_dq_tc", "ctg::cuda::kernels::attention_dkv_tc"};
};

// Over 48 KB of dynamic shared memory a block must be allowed, per kernel on
// the current device (each call: cheap, and allowed while a graph is captured).
template <class Kernel>
void allow_shared_bytes(Kernel kernel, std::size_t bytes, const char* name) {
  if (bytes <= 48 * 1024) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        (std::string("cudaFuncSetAttribute(") + name + ", " + std::to_string(bytes) + " bytes of shared memory)").c_str());
}

template <attention_pass Pass, attention_layout L, class T, int F>
void run_attention(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  using C = compute_t<T>;
  using K = attention_kernels<T, F>;
  static_assert(attention_mma_tiles::takes<T>(F) || attention_tiles::fits(F, sizeof(C)),
                "ctg: causal_attention on CUDA: a head dim too large for its tiles in shared memory (Dh up to 2559 in "
                "f32, 1279 in f64)");
  const auto a = ctg::detail::attention_heads_of(b.shape[g.child[0]], L);
  const dim_t blocks = a.heads * attention_tiles::blocks_per_head(a.tokens, K::rows);
  if (blocks == 0) return;
  if (blocks > dim_t{0x7fffffff}) throw error("ctg: causal_attention on CUDA: more than 2^31 blocks of rows");
  const unsigned grid = static_cast<unsigned>(blocks);
  auto in = [&](std::size_t k) { return b.template as<const T>(g.child[k]); };
  auto stat = [&](std::size_t k) { return b.template as<const C>(g.child[k]); };
  if constexpr (Pass == attention_pass::lse) {
    allow_shared_bytes(K::lse, K::shared[0], K::names[0]);
    K::lse<<<grid, K::threads, K::shared[0], ws.stream()>>>(in(0), in(1), b.template as<C>(g.root), a);
    check_launch(K::names[0]);
  } else if constexpr (Pass == attention_pass::output) {
    allow_shared_bytes(K::out, K::shared[1], K::names[1]);
    K::out<<<grid, K::threads, K::shared[1], ws.stream()>>>(in(0), in(1), in(2), stat(3), b.template as<T>(g.root), a);
    check_launch(K::names[1]);
  } else {
    T* dq = b.template as<T>(g.root);
    const dim_t n = b.shape[g.child[0]].numel();
    allow_shared_bytes(K::dq, K::shared[2], K::names[2]);
    K::dq<<<grid, K::threads, K::shared[2], ws.stream()>>>(in(0), in(1), in(2), stat(3), in(4), stat(5), dq, a);
    check_launch(K::names[2]);
    allow_shared_bytes(K::dkv, K::shared[3], K::names[3]);
    K::dkv<<<grid, K::threads, K::shared[3], ws.stream()>>>(in(0), in(1), in(2), stat(3), in(4), stat(5), dq + n,
                                                            dq + 2 * n, a);
    check_launch(K::names[3]);
  }
}

// Current scaling takes the amax in a pass of its own, then casts; delayed
// scaling casts with the stored scale while it takes the amax.
template <class TX, class Fmt, bool Delayed, int Margin>
void run_quantize(const group_call& g, const bindings_view& b, workspace& ws, float* amax_out) {
  const dim_t n = b.shape[g.root].numel();
  const TX* x = b.template as<const TX>(g.child[0]);
  Fmt* q = b.template as<Fmt>(g.root);
  fp8_side_data* side = fp8_side(b, g.root);
  const dim_t width = flat_width(n, x, q);
  CTG_CUDA_CHECK(cudaMemsetAsync(&side->amax, 0, sizeof(float), ws.stream()));
  if constexpr (!Delayed) {
    if (n > 0) {
      const dim_t x_width = flat_width(n, x);
      kernels::amax<tl::list<TX>><<<ws.dev().blocks_for(flat_work(n, x_width), threads), threads, 0, ws.stream()>>>(
          x, n, x_width, reinterpret_cast<unsigned*>(&side->amax));
      check_launch("ctg::cuda::kernels::amax");
    }
  }
  const float* scale_leaf = Delayed ? b.template as<const float>(g.child[1]) : nullptr;
  kernels::quantize<tl::list<TX, Fmt>, Delayed, Margin>
      <<<ws.dev().blocks_for(flat_work(n, width), threads), threads, 0, ws.stream()>>>(x, q, n, scale_leaf, side, width);
  check_launch("ctg::cuda::kernels::quantize");
  if constexpr (Delayed) {
    kernels::delayed_scale_inv<><<<1, 1, 0, ws.stream()>>>(side);
    check_launch("ctg::cuda::kernels::delayed_scale_inv");
  }
  if (amax_out)  // (the amax record's slot, in device memory: no wait)
    CTG_CUDA_CHECK(cudaMemcpyAsync(amax_out, &side->amax, sizeof(float), cudaMemcpyDeviceToDevice, ws.stream()));
}

template <class Fmt, class T>
void run_dequantize(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const dim_t n = b.shape[g.root].numel();
  if (n == 0) return;
  const Fmt* q = b.template as<const Fmt>(g.child[0]);
  T* out = b.template as<T>(g.root);
  const dim_t width = flat_width(n, q, out);
  kernels::dequantize<tl::list<Fmt, T>><<<ws.dev().blocks_for(flat_work(n, width), threads), threads, 0, ws.stream()>>>(
      q, fp8_side(b, g.child[0]), out, n, width);
  check_launch("ctg::cuda::kernels::dequantize");
}

}  // namespace runners

struct backend {
  static constexpr bool host_memory = false;
  static constexpr bool replays_launches = true;
  using arena = cuda::arena;
  using workspace = cuda::workspace;
  using group_clock = cuda::group_clock;

  static void copy(workspace& ws, std::byte* dst, const std::byte* src, std::size_t bytes) {
    if (bytes) CTG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ws.stream()));
  }
  // (From pageable host memory: it returns once the source is read; before a
  // device is given, once the copy is done.)
  static void upload(workspace& ws, std::byte* dst, const void* src, std::size_t bytes) {
    if (!bytes) return;
    CTG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ws.stream()));
    if (!ws.on_device()) CTG_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  static void download(workspace& ws, void* dst, const std::byte* src, std::size_t bytes) {
    if (!bytes) return;
    CTG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ws.stream()));
    CTG_CUDA_CHECK(cudaStreamSynchronize(ws.stream()));
  }
  // A run-time scalar's value (n <= 8 bytes), written by a kernel: a
  // stack's layers write theirs inside a step, which a graph captures.
  static void write_value(workspace& ws, std::byte* dst, const std::byte* bytes, std::size_t n) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, bytes, n);
    kernels::write_value<><<<1, 1, 0, ws.stream()>>>(dst, bits, static_cast<unsigned>(n));
    check_launch("ctg::cuda::kernels::write_value");
  }
  // A step's launches: run, captured or replayed (exec/cuda/step_graphs.cuh).
  template <class Body>
  static void replay_launches(workspace& ws, std::span<const std::byte> key, Body&& body) {
    ws.graphs().run(ws.stream(), key, body);
  }

  // Memory the host can read directly (not a GPU's).
  static bool host_readable(const void* p) {
    cudaPointerAttributes a{};
    CTG_CUDA_CHECK(cudaPointerGetAttributes(&a, p));
    return a.type != cudaMemoryTypeDevice;
  }
  // Device (or managed) memory is read in place; host memory is copied into the input's staging buffer.
  static std::byte* bind_input(workspace& ws, const void* fed, std::size_t bytes, arena& staging) {
    cudaPointerAttributes a{};
    CTG_CUDA_CHECK(cudaPointerGetAttributes(&a, fed));
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged)
      return const_cast<std::byte*>(static_cast<const std::byte*>(fed));
    staging.reserve(bytes + 1);
    upload(ws, staging.data(), fed, bytes);
    return staging.data();
  }

  // The runner of group R of step Key, instantiated on name-free types.
  template <class Key, std::size_t R>
  static consteval runner_t<workspace> runner_for() {
    using node = tl::at_t<R, typename step_of<Key>::nodes>;
    using T = typename node::dtype;
    using C0 = ctg::detail::child_dtype_t<Key, R, 0>;
    using C1 = ctg::detail::child_dtype_t<Key, R, 1>;
    if constexpr (node::kind == node_kind::stack || node::kind == node_kind::stack_grad) {
      return nullptr;
    } else if constexpr (node::kind == node_kind::matmul) {
      return &runners::run_matmul<C0, C1, T, node::transpose_a, node::transpose_b, node::sum_batches>;
    } else if constexpr (node::kind == node_kind::fp8_matmul) {
      return &runners::run_fp8_matmul<C0, C1, T, node::transpose_a, node::transpose_b, node::sum_batches>;
    } else if constexpr (node::kind == node_kind::transpose) {
      return &runners::run_transpose<T>;
    } else if constexpr (node::kind == node_kind::gather) {
      return &runners::run_gather<T>;
    } else if constexpr (node::kind == node_kind::scatter_add) {
      return &runners::run_scatter_add<T, C0>;
    } else if constexpr (node::kind == node_kind::quantize) {
      return &runners::run_quantize<C0, T, node::scaling::is_delayed, node::scaling::margin>;
    } else if constexpr (node::kind == node_kind::dequantize) {
      return &runners::run_dequantize<C0, T>;
    } else if constexpr (node::kind == node_kind::attention) {
      using Q = tl::at_t<0, typename node::children>;
      constexpr int features =
          static_cast<int>(Q::dims::dims[Q::dims::rank - ctg::detail::feature_axis_from_end<node::layout>]);
      return &runners::run_attention<node::pass, node::layout, typename Q::dtype, features>;
    } else {
      return &runners::run_fused<kernel::fused_plan_t<Key, R>>;
    }
  }

  // The scratch group R's runner takes during a step (workspace.cuh), reserved before it.
  template <class Key, std::size_t R>
  static consteval scratch_sizer_t<workspace> scratch_for() {
    using node = tl::at_t<R, typename step_of<Key>::nodes>;
    using T = typename node::dtype;
    if constexpr (node::kind == node_kind::matmul) {
      using C0 = ctg::detail::child_dtype_t<Key, R, 0>;
      using C1 = ctg::detail::child_dtype_t<Key, R, 1>;
      if constexpr (std::is_same_v<C0, C1>) return nullptr;
      else return &runners::reserve_matmul<C0, C1>;
    } else if constexpr (node::kind == node_kind::fp8_matmul) {
      using C0 = ctg::detail::child_dtype_t<Key, R, 0>;
      using C1 = ctg::detail::child_dtype_t<Key, R, 1>;
      return &runners::reserve_fp8_matmul<C0, C1, T, node::transpose_a, node::transpose_b, node::sum_batches>;
    } else if constexpr (node::kind == node_kind::scatter_add) {
      return &runners::reserve_scatter_add;
    } else {
      return nullptr;  // (a reduction's partials are made at their largest with the workspace)
    }
  }

  // Before a store of type S is made on dev: FP8 products need FP8 tensor cores.
  template <class S>
  static void check_device(const device& dev) {
    if (S::has_node_kind(node_kind::fp8_matmul) && !dev.has_fp8_gemm())
      throw error("ctg: fp8_matmul needs a GPU of compute capability 8.9 or newer (cuBLASLt FP8); this one is " +
                  std::to_string(dev.compute_capability()) + ": use a bf16 policy on it");
  }

  template <class T>
  static void accumulate(workspace& ws, std::byte* dst, const std::byte* src, std::size_t n) {
    if (n == 0) return;
    T* d = reinterpret_cast<T*>(dst);
    const T* s = reinterpret_cast<const T*>(src);
    const dim_t width = flat_width(static_cast<dim_t>(n), d, s);
    kernels::accumulate<tl::list<T>>
        <<<ws.dev().blocks_for(flat_work(static_cast<dim_t>(n), width), runners::threads), runners::threads, 0,
           ws.stream()>>>(d, s, static_cast<dim_t>(n), width);
    check_launch("ctg::cuda::kernels::accumulate");
  }
  // FP8 delayed scaling's bookkeeping (exec/fp8_state.hpp) on the device, a thread per layer.
  static void fold_amaxes(workspace& ws, const amax_fold& f) {
    kernels::each_layer<<<ws.dev().blocks_for(f.layers, 32), 32, 0, ws.stream()>>>(f, f.layers);
    check_launch("ctg::cuda::kernels::each_layer (amax_fold)");
  }
  static void update_fp8(workspace& ws, const fp8_update& u) {
    kernels::each_layer<<<ws.dev().blocks_for(u.layers, 32), 32, 0, ws.stream()>>>(u, u.layers);
    check_launch("ctg::cuda::kernels::each_layer (fp8_update)");
  }
};

template <class Step>
using store = basic_store<backend, step_key_t<Step>>;

}  // namespace cuda

template <class Root, class Wrt, bool Fuse>
cuda::store<graph_step<Root, Wrt, Fuse>> make_store(const cuda::device& dev, graph_step<Root, Wrt, Fuse>) {
  cuda::backend::check_device<cuda::store<graph_step<Root, Wrt, Fuse>>>(dev);
  return cuda::store<graph_step<Root, Wrt, Fuse>>(dev);
}
inline invalid_store make_store(const cuda::device&, invalid_step) { return {}; }

}  // namespace ctg

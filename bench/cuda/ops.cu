// Single operations on one GPU, against the bandwidth a copy reaches there
// (issue 13's goals: fused memory-bound groups at 90 % or more of the copy
// bandwidth, FP8 linear forward and backward at least 1.6x bf16):
//   * copy: cudaMemcpyAsync, device to device (2 x bytes per copy);
//   * fused groups, one kernel each (cuda::launch_fused on device buffers):
//     SwiGLU's product, an RMSNorm's rows, attention's softmax rows (alone,
//     and writing its bf16 cast too: a side output, lower/schedule.hpp); each
//     in 16-byte chunks (the kernels' way when buffers are aligned) and
//     element by element (the output one element off its alignment, so the
//     launch cannot take chunks), in the same run;
//   * whole steps on a store (forward and backward, ctg::value_and_grad of
//     sum(y * g), g an upstream gradient fed in device memory): RMSNorm and
//     SwiGLU of [8192, 4096] bf16, a linear of 8192 x 8192 x 8192 in bf16 and
//     in FP8 (precision::fp8, delayed scaling); and a forward step that
//     quantizes [8192, 4096] bf16 to e4m3 (delayed: amax and cast in one
//     pass) and dequantizes it; GPT-2's loss head, a bf16 product to
//     [8192, 50304] logits and cross_entropy, forward and backward.
// GB/s counts the bytes an ideal kernel moves (each input read once, each
// output written once); TFLOP/s the products' 2 m n k. Times with CUDA
// events over 20 calls after 3 warm-ups (common.cuh); a step waits for its
// loss each call. bench/vs_pytorch_gpu.py --ops runs PyTorch's eager and
// torch.compile versions of the same steps beside it. Prints one line per
// case,
//   op <name> ms <t> [GB/s <b> copy_pct <p>] [TFLOP/s <f>]
// and returns 77 without a GPU.
//   build/default/bench/bench_cuda_ops [--profile]
// --profile: the copy and the whole steps only, each step then run 3 times
// more with its groups timed one by one (exec/group_profile.hpp): a table of
// each group's time, GB/s and GFLOP/s under the step's line, so one run says
// which group of an RMSNorm's or a linear's step is far from the copy.
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/store.cuh>
#include <ctg/io/graph_text.hpp>

#include "common.cuh"

namespace {
using ctg::dim_t;
namespace cu = ctg::cuda;
namespace pr = ctg::precision;
using bench_cuda::device_bytes;
using bench_cuda::time_ms;

double copy_gbps = 0;  // (measured first)
bool profiled = false;  // --profile

void report(const char* name, float ms, double bytes, double flop = 0) {
  std::printf("op %s ms %.4f", name, ms);
  if (bytes > 0) {
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    std::printf(" GB/s %.0f copy_pct %.0f", gbps, copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0.0);
  }
  if (flop > 0) std::printf(" TFLOP/s %.1f", flop / (ms * 1e-3) / 1e12);
  std::printf("\n");
  std::fflush(stdout);
}

void copy_case(const cu::device& dev) {
  const std::size_t bytes = std::size_t(256) << 20;
  device_bytes a(bytes), b(bytes);
  const float ms = time_ms(dev, [&] {
    CTG_CUDA_CHECK(cudaMemcpyAsync(b.mem.data(), a.mem.data(), bytes, cudaMemcpyDeviceToDevice, dev.stream()));
  });
  copy_gbps = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
  report("copy 256MiB", ms, 2.0 * double(bytes));
}

// Group Root of Step (its slots all leaves of static shapes) as one kernel
// on device buffers, in chunks and element by element.
template <class Step, class Root>
void group_case(const cu::device& dev, const char* name, Step, Root) {
  using nodes = typename Step::nodes;
  constexpr std::size_t R = ctg::tl::index_of<Root, nodes>::value;
  using info = ctg::detail::group_info<Step, R>;
  using Plan = ctg::kernel::fused_plan_t<Step, R>;
  using T = typename Root::dtype;
  using iter = ctg::tl::at_t<info::iteration_node, nodes>;
  ctg::kernel::loop_layout<Plan::buffer_slots> layout;
  layout.rank = iter::dims::rank;
  for (std::size_t d = 0; d < layout.rank; ++d) layout.dims[d] = iter::dims::dims[d];
  typename Plan::context c;
  std::vector<device_bytes> bufs;
  bufs.reserve(info::ninputs);
  double bytes = 0;
  [&]<std::size_t... S>(std::index_sequence<S...>) {
    auto one = [&]<std::size_t Slot>(std::integral_constant<std::size_t, Slot>) {
      using N = ctg::tl::at_t<info::info.input[Slot], nodes>;
      static_assert(N::kind == ctg::node_kind::leaf, "a group of leaves");
      const std::size_t n = N::dims::static_numel * sizeof(typename N::dtype);
      bufs.emplace_back(n);
      CTG_CUDA_CHECK(cudaMemset(bufs.back().mem.data(), 0x3C, n));  // (0x3C3C: 0.0115 in bf16)
      c.ptr[Slot] = bufs.back().mem.data();
      ctg::dim_t dims[ctg::max_rank];
      for (std::size_t d = 0; d < N::dims::rank; ++d) dims[d] = N::dims::dims[d];
      layout.set_slot(Slot, N::dims::rank, dims);
      bytes += double(n);
    };
    (one(std::integral_constant<std::size_t, S>{}), ...);
  }(std::make_index_sequence<info::ninputs>{});
  // Its outputs: the root, and a side output (a cast of it) where it has one.
  constexpr bool has_side = Plan::outputs::has_side;
  using S = std::conditional_t<has_side, typename Plan::side_dtype, std::byte>;
  const std::size_t out_n = Root::dims::static_numel;
  bytes += double(out_n * sizeof(T)) + (has_side ? double(out_n * sizeof(S)) : 0.0);
  device_bytes out(out_n * sizeof(T) + 16), side(has_side ? out_n * sizeof(S) + 16 : 16);
  for (bool chunks : {true, false}) {
    typename Plan::outputs o;
    o.root = reinterpret_cast<T*>(out.mem.data()) + (chunks ? 0 : 1);
    if constexpr (has_side) o.side = reinterpret_cast<S*>(side.mem.data()) + (chunks ? 0 : 1);
    const float ms = time_ms(dev, [&] { cu::launch_fused<Plan>(dev, c, layout, o); });
    const std::string label = std::string(name) + (chunks ? "" : "/elements");
    report(label.c_str(), ms, bytes);
  }
}

using A = ctg::input<"a", ctg::bf16, 8192, 4096>;
using B = ctg::input<"b", ctg::bf16, 8192, 4096>;
using Sc = ctg::input<"s", ctg::bf16, 4096>;
using Scores = ctg::input<"scores", ctg::f32, 8 * 12 * 1024, 1024>;
using Wv = ctg::param<"wv", ctg::bf16, 1024, 64>;  // (attention's v of one head: the side output case)

// A whole step on `store`: the median of calls of `run`, which runs it
// once; with --profile, then 3 calls with each group timed alone.
template <class Store, class Run>
void step_case(const cu::device& dev, const char* name, double bytes, double flop, Store& store, Run&& run) {
  report(name, time_ms(dev, run), bytes, flop);
  if (!profiled) return;
  store.profile_groups(true);
  for (int i = 0; i < 3; ++i) run();
  store.profile_groups(false);
  std::printf("%s: each group timed alone, 3 calls\n%s\n", name, ctg::io::group_profile_text(store).c_str());
  std::fflush(stdout);
}

// Upstream gradients and inputs fed in device memory (read in place).
struct device_bf16 {
  device_bytes mem;
  std::size_t n;
  explicit device_bf16(std::size_t elements) : mem(elements * 2), n(elements) {
    CTG_CUDA_CHECK(cudaMemset(mem.mem.data(), 0x3C, elements * 2));
  }
  std::span<const ctg::bf16> span() const { return {reinterpret_cast<const ctg::bf16*>(mem.mem.data()), n}; }
};

using Xp = ctg::param<"x", ctg::bf16, 8192, 4096>;
using Sp = ctg::param<"scale", ctg::bf16, 4096>;
using Ap = ctg::param<"a", ctg::bf16, 8192, 4096>;
using Bp = ctg::param<"b", ctg::bf16, 8192, 4096>;
using G = ctg::input<"g", ctg::bf16, 8192, 4096>;
using Xl = ctg::param<"x", ctg::bf16, 8192, 8192>;
using Wl = ctg::param<"w", ctg::f32, 8192, 8192>;
using Gl = ctg::input<"g", ctg::bf16, 8192, 8192>;
using Xh = ctg::param<"x", ctg::bf16, 8192, 768>;
using Wh = ctg::param<"w", ctg::f32, 768, 50304>;
using Th = ctg::input<"targets", ctg::i32, 8192>;
// GPT-2's attention: batch 8, 12 heads of 64, T = 1024, token rows.
using Qa = ctg::param<"q", ctg::bf16, 8, 12, 1024, 64>;
using Ka = ctg::param<"k", ctg::bf16, 8, 12, 1024, 64>;
using Va = ctg::param<"v", ctg::bf16, 8, 12, 1024, 64>;
using Ga = ctg::input<"g", ctg::bf16, 8, 12, 1024, 64>;

template <class Y>
constexpr auto against(Y y, auto g) {
  return ctg::sum(ctg::cast<ctg::f32>(y) * ctg::cast<ctg::f32>(g));
}

void step_cases(const cu::device& dev) {
  const double act = 8192.0 * 4096.0 * 2;  // one [8192, 4096] bf16 tensor, bytes
  device_bf16 g(8192 * 4096);
  {
    auto xf = ctg::cast<ctg::f32>(Xp{});
    auto y = ctg::cast<ctg::bf16>(xf * ctg::rsqrt(ctg::mean<-1>(ctg::square(xf)) + ctg::lit<1e-5>) *
                                  ctg::cast<ctg::f32>(Sp{}));
    auto step = ctg::value_and_grad(against(y, G{}));
    auto store = ctg::make_store(dev, step);
    ctg::nn::init_params(store, 1);
    step_case(dev, "rmsnorm_fwd_bwd [8192,4096] bf16", 3 * act, 0, store,
              [&] { step(store, ctg::feed(G{}, g.span())); });
  }
  {
    auto y = ctg::silu(Ap{}) * Bp{};
    auto step = ctg::value_and_grad(against(y, G{}));
    auto store = ctg::make_store(dev, step);
    ctg::nn::init_params(store, 1);
    step_case(dev, "swiglu_fwd_bwd [8192,4096] bf16", 5 * act, 0, store,
              [&] { step(store, ctg::feed(G{}, g.span())); });
  }
  {
    device_bf16 a(8192 * 4096);
    using Q = ctg::scaling::delayed<"q", pr::delayed<>>;
    auto step = ctg::forward(ctg::dequantize<ctg::bf16>(ctg::quantize<ctg::e4m3, Q>(A{})));
    auto store = ctg::make_store(dev, step);
    step_case(dev, "quantize_e4m3_delayed+dequantize [8192,4096] bf16", 3 * act, 0, store,
              [&] { step(store, ctg::feed(A{}, a.span())); });
  }
  const double flop = 3 * 2.0 * 8192.0 * 8192.0 * 8192.0;
  device_bf16 gl(8192 * 8192);
  {
    auto step = ctg::value_and_grad(against(ctg::nn::linear<pr::autocast<ctg::bf16>>(Xl{}, Wl{}), Gl{}));
    auto store = ctg::make_store(dev, step);
    ctg::nn::init_params(store, 1);
    step_case(dev, "linear_fwd_bwd 8192^3 bf16", 0, flop, store, [&] { step(store, ctg::feed(Gl{}, gl.span())); });
  }
  if (dev.has_fp8_gemm()) {
    auto step = ctg::value_and_grad(against(ctg::nn::linear<pr::fp8<>>(Xl{}, Wl{}), Gl{}));
    auto store = ctg::make_store(dev, step);
    ctg::nn::init_params(store, 1);
    step_case(dev, "linear_fwd_bwd 8192^3 fp8", 0, flop, store, [&] { step(store, ctg::feed(Gl{}, gl.span())); });
  }
  {
    // Causal attention, fused (ctg::causal_attention) and composed (products and a softmax loop, as
    // nn::causal_self_attention by default). flop: the causal half of attention's six products of
    // 2 B H T^2 Dh (forward two, backward four; recomputed scores not counted).
    const std::size_t n = 8 * 12 * 1024 * 64;
    device_bf16 ga(n);
    const double attn_flop = 0.5 * 6 * 2.0 * 8 * 12 * 1024.0 * 1024.0 * 64;
    {
      auto step = ctg::value_and_grad(against(ctg::causal_attention(Qa{}, Ka{}, Va{}), Ga{}));
      auto store = ctg::make_store(dev, step);
      ctg::nn::init_params(store, 1);
      step_case(dev, "attention_fwd_bwd [8,12,1024,64] bf16 fused", 0, attn_flop, store,
                [&] { step(store, ctg::feed(Ga{}, ga.span())); });
    }
    {
      auto scores = ctg::cast<ctg::f32>(ctg::matmul(Qa{}, ctg::transpose(Ka{}))) * ctg::lit<0.125>;
      auto o = ctg::matmul(ctg::cast<ctg::bf16>(ctg::softmax(ctg::causal_mask(scores))), Va{});
      auto step = ctg::value_and_grad(against(o, Ga{}));
      auto store = ctg::make_store(dev, step);
      ctg::nn::init_params(store, 1);
      step_case(dev, "attention_fwd_bwd [8,12,1024,64] bf16 composed", 0, attn_flop, store,
                [&] { step(store, ctg::feed(Ga{}, ga.span())); });
    }
  }
  {
    // GPT-2's loss head: its product and cross-entropy over 8192 tokens.
    auto loss = ctg::nn::cross_entropy(ctg::nn::linear<pr::autocast<ctg::bf16>>(Xh{}, Wh{}), Th{});
    auto step = ctg::value_and_grad(loss);
    auto store = ctg::make_store(dev, step);
    ctg::nn::init_params(store, 1);
    std::vector<ctg::i32> targets(8192);
    for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<ctg::i32>((i * 7919) % 50304);
    step_case(dev, "lm_head_fwd_bwd [8192,768]x[768,50304] bf16", 0, 3 * 2.0 * 8192 * 768 * 50304, store,
              [&] { step(store, ctg::feed(Th{}, targets)); });
  }
}
}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) profiled = profiled || !std::strcmp(argv[i], "--profile");
  return bench_cuda::run_on_gpu([](const cu::device& dev) {
    copy_case(dev);
    if (profiled) return step_cases(dev);
    {
      auto y = ctg::silu(A{}) * B{};
      group_case(dev, "group swiglu [8192,4096] bf16", ctg::forward(y), y);
    }
    {
      auto af = ctg::cast<ctg::f32>(A{});
      auto y = ctg::cast<ctg::bf16>(af * ctg::rsqrt(ctg::mean<-1>(ctg::square(af)) + ctg::lit<1e-5>) *
                                    ctg::cast<ctg::f32>(Sc{}));
      group_case(dev, "group rmsnorm [8192,4096] bf16", ctg::forward(y), y);
    }
    {
      auto y = ctg::softmax(Scores{});
      group_case(dev, "group softmax [98304,1024] f32", ctg::forward(y), y);
      // Attention's: the probabilities in f32 (read by backward) and their
      // bf16 cast (read by the product with v), one loop writing both.
      auto both = ctg::forward(ctg::sum(ctg::sum<0>(y)) +
                               ctg::sum(ctg::cast<ctg::f32>(ctg::matmul(ctg::cast<ctg::bf16>(y), Wv{}))));
      group_case(dev, "group softmax + bf16 cast [98304,1024]", both, y);
    }
    step_cases(dev);
  });
}

#pragma once
// The CPU reference backend: one loop nest per fusion group, the group's
// expression inlined in the loop body.
//
//   ctg::cpu::device dev;
//   auto store = ctg::make_store(dev, step);   // params, grads, scratch
//   float loss = step(store, ctg::feed<X>(x, batch));
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <ctg/core/fp8_scaling.hpp>
#include <ctg/exec/buffer_placement.hpp>
#include <ctg/exec/cpu_gemm.hpp>
#include <ctg/exec/feed.hpp>
#include <ctg/exec/group_info.hpp>
#include <ctg/exec/kernel_expr.hpp>
#include <ctg/exec/loop_layout.hpp>
#include <ctg/exec/runtime_shapes.hpp>
#include <ctg/graph/autodiff.hpp>
#include <ctg/graph/program.hpp>

namespace ctg {
namespace cpu {

struct device {};

// 64-byte aligned bytes, grown on demand, never shrunk.
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

inline constexpr std::size_t align_up(std::size_t n) { return (n + 63) / 64 * 64; }

template <class Step>
class store {
  using sched = schedule<Step>;
  using nodes = typename Step::nodes;
  static constexpr std::size_t N = sched::size;
  static constexpr const auto& table = sched::table;
  static constexpr const auto& ptab = program<Step>::table;
  static constexpr std::size_t first_output = tl::index_of_v<tl::at_t<0, typename Step::outputs>, nodes>;
  template <std::size_t I>
  using node_at = tl::at_t<I, nodes>;

  template <class L>
  static constexpr std::size_t numel_of() {
    return L::dims::static_numel;
  }

  // Parameters (trainable and frozen) live in one arena at fixed offsets; so do gradients.
  template <class L>
  static consteval bool stored_leaf() {
    if constexpr (is_leaf_v<L>) return !L::fed;
    else return false;
  }
  struct leaf_layout {
    std::size_t param_offset[N]{};
    std::size_t param_bytes = 0;
    std::size_t grad_offset[N]{};  // by node index of the leaf
    std::size_t grad_bytes = 0;
  };
  static constexpr leaf_layout layout = [] {
    leaf_layout l;
    [&]<class... Ns>(tl::list<Ns...>) {
      std::size_t i = 0;
      auto one = [&]<class L>(std::type_identity<L>) {
        if constexpr (stored_leaf<L>()) {
          constexpr std::size_t bytes = align_up(sizeof(typename L::dtype) * numel_of<L>());
          l.param_offset[i] = l.param_bytes;
          l.param_bytes += bytes;
          if constexpr (tl::contains_v<L, typename Step::wrt>) {
            l.grad_offset[i] = l.grad_bytes;
            l.grad_bytes += bytes;
          }
        }
        ++i;
      };
      (one(std::type_identity<Ns>{}), ...);
    }(nodes{});
    return l;
  }();


 public:
  using step_type = Step;

  // Parameters start at 0; FP8 scales at 1 (their amax histories at 0).
  store() {
    params_.reserve(layout.param_bytes ? layout.param_bytes : 64);
    grads_.reserve(layout.grad_bytes ? layout.grad_bytes : 64);
    [&]<class... Ns>(tl::list<Ns...>) {
      auto one = [&]<class L>(std::type_identity<L>) {
        if constexpr (is_leaf_v<L>)
          if constexpr (L::role == leaf_role::state && is_scale_leaf<L>())
            for (auto& v : param<L>()) v = 1.0f;
      };
      (one(std::type_identity<Ns>{}), ...);
    }(nodes{});
  }

  // The values of a stored leaf (trainable, frozen or state): read, write, initialise.
  template <class L>
  std::span<typename L::dtype> param() {
    static_assert(tl::contains_v<L, nodes>, "ctg: this leaf is not part of the step's graph");
    static_assert(stored_leaf<L>(), "ctg: inputs are fed, not stored: use ctg::feed<X>");
    constexpr std::size_t i = tl::index_of_v<L, nodes>;
    return {reinterpret_cast<typename L::dtype*>(params_.data() + layout.param_offset[i]), numel_of<L>()};
  }

  // The gradient of L from the last successful step.
  template <class L>
  std::span<const typename L::dtype> grad() {
    static_assert(!stored_leaf<L>() || L::role != leaf_role::frozen,
                  "ctg: frozen parameter: a frozen leaf has no gradient");
    static_assert(tl::contains_v<L, typename Step::wrt>,
                  "ctg: no gradient path: this leaf is not in the step's wrt<...>");
    constexpr std::size_t i = tl::index_of_v<L, nodes>;
    return {reinterpret_cast<const typename L::dtype*>(grads_.data() + layout.grad_offset[i]), numel_of<L>()};
  }

  // The same, naming the leaf by a value: store.param(W{}), store.grad(W{})
  // (the form for .cu files; see ctg::feed(X{}, ...)).
  template <class L>
    requires is_leaf_v<L>
  std::span<typename L::dtype> param(L) {
    return param<L>();
  }
  template <class L>
    requires is_leaf_v<L>
  std::span<const typename L::dtype> grad(L) {
    return grad<L>();
  }

  // The value of the step's first output (the loss, or forward(e)'s e) after the last step.
  auto value() const {
    using out = tl::at_t<0, typename Step::outputs>;
    return std::span<const typename out::dtype>(reinterpret_cast<const typename out::dtype*>(out_[published_].data()),
                                                value_count_);
  }

  // Output K of the step (0: the loss; K > 0: the gradient of the K-th wrt leaf)
  // as computed by the last run: valid until the next run. (ctg::nn::stack
  // reads its per-layer results this way.)
  template <std::size_t K>
  auto output() const {
    using out = tl::at_t<K, typename Step::outputs>;
    constexpr std::size_t i = tl::index_of_v<out, nodes>;
    return std::span<const typename out::dtype>(reinterpret_cast<const typename out::dtype*>(buf_[i]),
                                                static_cast<std::size_t>(shapes_[i].numel()));
  }

  // The same, by run-time index, as bytes.
  const std::byte* output_bytes(std::size_t k) const {
    const std::byte* p = nullptr;
    [&]<class... Os>(tl::list<Os...>) {
      std::size_t j = 0;
      ((p = j++ == k ? buf_[tl::index_of_v<Os, nodes>] : p), ...);
    }(typename Step::outputs{});
    return p;
  }

  // Dropout's random stream: a seed (0 unless set), and the count of
  // successful steps, which keys each step's masks (state: it changes once
  // per step, after backward, and is saved with the parameters).
  void seed(std::uint64_t s) { key_.seed = s; }
  std::uint64_t seed() const { return key_.seed; }
  std::uint32_t steps_run() const { return key_.step; }
  void set_steps_run(std::uint32_t n) { key_.step = n; }

  // When on, a step whose loss is not finite throws ctg::error and changes nothing.
  void check_finite(bool on) { check_finite_ = on; }

  // Run one step: validate feeds, resolve shapes, run every group, then commit.
  template <class... Feeds>
  CTG_NOINLINE float run(const Feeds&... feeds) {
    prepare(nullptr, feeds...);
    run_positions<0, ptab.len>();
    return commit();
  }

  // Bytes of the forward values kept for backward, and of all scratch
  // buffers, as placed for the last run (or plan).
  // (A stack's layers count with all they keep.)
  std::size_t kept_bytes() const { return kept_bytes_ + stack_kept_bytes(); }
  std::size_t scratch_bytes() const { return kept_bytes_ + rest_bytes_ + stack_kept_bytes(); }

  // The forward and backward parts of a step run apart (ctg::nn::stack keeps
  // each layer's forward values this way): plan() returns the kept bytes for
  // these feeds; run_forward_part writes the kept values into `kept`, and
  // run_backward_part, given the same feeds and `kept`, reads them back.
  // Neither commits: read the results with output<K>().
  // (The plan of a step with stacks includes what their layers keep.)
  template <class... Feeds>
  std::size_t plan(const Feeds&... feeds) {
    prepare(nullptr, feeds...);
    plan_stacks(std::make_index_sequence<N>{});
    return kept_bytes();
  }
  template <class... Feeds>
  void run_forward_part(std::byte* kept, const Feeds&... feeds) {
    prepare(kept, feeds...);
    run_positions<0, ptab.backward_begin>();
  }
  template <class... Feeds>
  void run_backward_part(std::byte* kept, const Feeds&... feeds) {
    prepare(kept, feeds...);
    run_positions<ptab.backward_begin, ptab.len>();
  }
  // Both parts, the forward one as a recompute (it writes no state).
  template <class... Feeds>
  void run_recomputing(std::byte* kept, const Feeds&... feeds) {
    prepare(kept, feeds...);
    recomputing_ = true;
    run_positions<0, ptab.backward_begin>();
    recomputing_ = false;
    run_positions<ptab.backward_begin, ptab.len>();
  }

  // The value of node E of the step after the last run: an output, or the
  // forward part's root (valid until the next run).
  template <class E>
  std::span<const typename E::dtype> value_of() const {
    constexpr std::size_t i = tl::index_of_v<E, nodes>;
    static_assert(table.node[i].output, "ctg: value_of reads outputs and the forward root only");
    return {reinterpret_cast<const typename E::dtype*>(buf_[i]), static_cast<std::size_t>(shapes_[i].numel())};
  }

 private:
  template <class... Feeds>
  void prepare(std::byte* kept_area, const Feeds&... feeds) {
    kept_area_ = kept_area;
    bind_feeds(feeds...);
    resolve_shapes(std::make_index_sequence<N>{});
    plan_memory(std::make_index_sequence<N>{});
  }

  // ------------------------------------------------------------ feeds ----
  template <class... Feeds>
  void bind_feeds(const Feeds&... feeds) {
    (check_feed_used<typename Feeds::leaf>(), ...);
    [&]<class... Ns>(tl::list<Ns...>) {
      std::size_t i = 0;
      ((bind_one<Ns>(i++, feeds...)), ...);
    }(nodes{});
  }
  template <class L>
  void check_feed_used() {
    if constexpr (!tl::contains_v<L, nodes>)
      throw error(std::string("ctg: feed for input '") + L::name.c_str() + "', which this step does not read");
  }
  template <class L, class... Feeds>
  void bind_one(std::size_t i, const Feeds&... feeds) {
    if constexpr (is_leaf_v<L>) {
      if constexpr (L::fed) {
        constexpr std::size_t count = (std::size_t(0) + ... + std::is_same_v<typename Feeds::leaf, L>);
        if constexpr (count == 0) {
          throw error(std::string("ctg: missing feed for input '") + L::name.c_str() + "'");
        } else {
          if (count > 1) throw error(std::string("ctg: input '") + L::name.c_str() + "' is fed twice");
          auto take = [&](const auto& f) {
            if constexpr (std::is_same_v<typename std::decay_t<decltype(f)>::leaf, L>) bind_input<L>(i, f);
          };
          (take(feeds), ...);
        }
      } else {
        buf_[i] = params_.data() + layout.param_offset[i];
      }
    }
  }
  template <class L>
  void bind_input(std::size_t i, const feed_t<L>& f) {
    rt_shape s = detail::static_rt<typename L::dims>();
    for (std::size_t d = 0, k = 0; d < s.rank; ++d)
      if (s.d[d] == dyn) s.d[d] = f.dyn_dims[k++];
    const std::string what = std::string("input '") + L::name.c_str() + "'";
    const dim_t n = detail::checked_numel(s, what.c_str());
    if (f.data.data() == nullptr && n > 0) throw error("ctg: " + what + " is fed a null pointer");
    if (static_cast<dim_t>(f.data.size()) != n)
      throw error("ctg: " + what + " expects " + std::to_string(n) + " elements (dims " + detail::dims_text(s) +
                  ") but was fed " + std::to_string(f.data.size()));
    shapes_[i] = s;
    buf_[i] = const_cast<std::byte*>(reinterpret_cast<const std::byte*>(f.data.data()));
  }

  // ----------------------------------------------------------- shapes ----
  template <std::size_t... I>
  void resolve_shapes(std::index_sequence<I...>) {
    (detail::resolve_shape<nodes, I>(shapes_.data()), ...);
  }

  // ----------------------------------------------------------- memory ----
  // Every buffer the program's lives call for (see program.hpp) is placed in
  // scratch, sharing bytes with buffers whose lives do not overlap; the
  // values kept for backward form a pool of their own (which a caller may
  // provide: run_forward_part). The first output is written straight into
  // the unpublished output buffer.
  struct life_ref {
    std::size_t node = 0, life = 0;
  };
  struct life_order {
    life_ref kept[N + 1]{};
    std::size_t nkept = 0;
    life_ref rest[2 * N + 1]{};
    std::size_t nrest = 0;
  };
  static constexpr life_order lives = [] {
    life_order o;
    for (std::size_t q = 0; q <= ptab.len; ++q)
      for (std::size_t j = 0; j < N; ++j)
        for (std::size_t l = 0; l < 2; ++l) {
          if (j == first_output || !ptab.has_life[j][l] || ptab.begin[j][l] != q) continue;
          if (l == 0 && ptab.kept[j]) o.kept[o.nkept++] = {j, 0};
          else o.rest[o.nrest++] = {j, l};
        }
    return o;
  }();
  static constexpr std::array<std::size_t, N> view_byte_offset = []<class... Ns>(tl::list<Ns...>) {
    std::array<std::size_t, N> a{};
    std::size_t i = 0;
    auto one = [&]<class V>(std::type_identity<V>) {
      if constexpr (requires { V::byte_offset; }) a[i] = V::byte_offset;
      ++i;
    };
    (one(std::type_identity<Ns>{}), ...);
    return a;
  }(nodes{});

  template <std::size_t... I>
  void plan_memory(std::index_sequence<I...>) {
    std::array<std::size_t, N> bytes{};
    std::size_t acc = 0;
    auto size_one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      using node = node_at<J>;
      if constexpr (ptab.owns[J]) {
        const dim_t n = detail::checked_numel(shapes_[J], "an intermediate");
        bytes[J] = buffer_bytes<node>(static_cast<std::size_t>(n));
        if constexpr (node::kind == node_kind::reduce) acc = std::max(acc, static_cast<std::size_t>(n));
      }
    };
    (size_one(std::integral_constant<std::size_t, I>{}), ...);
    if (bytes != bytes_) {
      bytes_ = bytes;
      place_buffers();
    }
    if constexpr (ptab.owns[first_output]) out_[1 - published_].reserve(bytes[first_output]);
    scratch_.reserve(rest_bytes_ + (kept_area_ ? 0 : kept_bytes_));
    if (acc_.size() < acc) acc_.resize(acc);
    if (accf_.size() < acc) accf_.resize(acc);
    for (std::size_t j = 0; j < N; ++j)
      if (ptab.owns[j]) buf_[j] = j == first_output ? out_[1 - published_].data() : buffer_at(j, 0);
    bind_views();
    auto fill = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      if constexpr (node_at<J>::kind == node_kind::runtime_scalar) fill_runtime_scalar<J>();
    };
    (fill(std::integral_constant<std::size_t, I>{}), ...);
  }

  void place_buffers() {
    std::vector<detail::buffer_life> l(lives.nkept + lives.nrest + 1);
    std::vector<std::size_t> at(l.size());
    auto place = [&](const life_ref* refs, std::size_t count) {
      for (std::size_t i = 0; i < count; ++i) {
        const life_ref r = refs[i];
        l[i] = {ptab.begin[r.node][r.life], ptab.end[r.node][r.life], bytes_[r.node]};
      }
      const std::size_t size = detail::place_lives(l.data(), count, at.data());
      for (std::size_t i = 0; i < count; ++i) offset_[refs[i].node][refs[i].life] = at[i];
      return size;
    };
    kept_bytes_ = place(lives.kept, lives.nkept);
    rest_bytes_ = place(lives.rest, lives.nrest);
  }

  std::byte* buffer_at(std::size_t j, std::size_t life) {
    if (life == 0 && ptab.kept[j]) return (kept_area_ ? kept_area_ : scratch_.data()) + offset_[j][0];
    return scratch_.data() + (kept_area_ ? 0 : kept_bytes_) + offset_[j][life];
  }
  void bind_views() {
    for (std::size_t j = 0; j < N; ++j)
      if (table.node[j].kind == node_kind::view) buf_[j] = buf_[table.node[j].child[0]] + view_byte_offset[j];
  }
  // Backward reads the recomputed values of a region from here on.
  void enter_recompute(std::size_t region) {
    for (std::size_t j = 0; j < N; ++j)
      if (ptab.region[j] == region && ptab.has_life[j][1]) buf_[j] = buffer_at(j, 1);
    bind_views();
  }

  // A node's region: its value, and for a stack every layer's input, for a
  // stack's backward the stacked leaves' gradients before it.
  template <class Node>
  static std::size_t buffer_bytes(std::size_t numel) {
    std::size_t bytes = numel * sizeof(typename Node::dtype);
    if constexpr (Node::kind == node_kind::stack) bytes *= Node::layers;
    if constexpr (Node::kind == node_kind::stack_grad) bytes += Node::leading_bytes;
    if constexpr (Node::kind == node_kind::quantize) bytes = align_up(bytes) + fp8_side_bytes;
    return align_up(bytes + 1);
  }

  template <std::size_t J>
  void fill_runtime_scalar() {
    using node = node_at<J>;
    using big = tl::at_t<0, typename node::children>;
    using small = tl::at_t<1, typename node::children>;
    const double ratio = static_cast<double>(shapes_[tl::index_of_v<small, nodes>].numel()) /
                         static_cast<double>(shapes_[tl::index_of_v<big, nodes>].numel());
    *reinterpret_cast<typename node::dtype*>(buf_[J]) = store_as<typename node::dtype>(ratio);
  }

  // ----------------------------------------------------------- groups ----
  template <std::size_t From, std::size_t To>
  void run_positions() {
    [&]<std::size_t... Q>(std::index_sequence<Q...>) {
      (run_position<From + Q>(), ...);
    }(std::make_index_sequence<To - From>{});
  }
  template <std::size_t Q>
  void run_position() {
    if constexpr (ptab.enter_region[Q] != no_region) enter_recompute(ptab.enter_region[Q]);
    constexpr std::size_t R = ptab.root[Q];
    constexpr node_kind k = node_at<R>::kind;
    if constexpr (k == node_kind::matmul) run_matmul<R>();
    else if constexpr (k == node_kind::transpose) run_transpose<R>();
    else if constexpr (k == node_kind::gather) run_gather<R>();
    else if constexpr (k == node_kind::scatter_add) run_scatter_add<R>();
    else if constexpr (k == node_kind::stack) run_stack<R>();
    else if constexpr (k == node_kind::stack_grad) run_stack_grad<R>();
    else if constexpr (k == node_kind::quantize) run_quantize<R>(!recomputing_ && !ptab.recompute[Q]);
    else if constexpr (k == node_kind::dequantize) run_dequantize<R>();
    else if constexpr (k == node_kind::fp8_matmul) run_fp8_matmul<R>();
    else run_fused<R>();
  }

  // Strides of a buffer of shape `s` seen from a loop over shape `it` (right-aligned, 0 where it broadcasts).
  static void loop_strides(const rt_shape& s, const rt_shape& it, dim_t* stride) {
    kernel::broadcast_strides(s.rank, s.d, it.rank, stride);
  }

  // A group's loop body is kernel::body_t (exec/kernel_expr.hpp): the same
  // name-free expression type the CUDA kernels evaluate.
  template <std::size_t R>
  struct fused {
    using info = detail::group_info<Step, R>;
    static constexpr std::size_t K = info::ninputs > 0 ? info::ninputs : 1;
    static constexpr std::size_t NR = info::nreductions > 0 ? info::nreductions : 1;
    using ctx = kernel::context<K, NR>;
    using body = kernel::body_t<Step, R>;
    // The root of a reduction group, as a row reduction of the body.
    template <class Op>
    using root_reduction = kernel::row_reduction<0, Op, typename node_at<R>::dtype, body>;

    // The row's inlined reductions, in slot order (a later one may read an earlier one).
    template <class... Rs>
    static CTG_FORCEINLINE void inline_reductions([[maybe_unused]] ctx& c, [[maybe_unused]] dim_t L, tl::list<Rs...>) {
      ((c.local[Rs::slot] = Rs::value_of(Rs::combine_in_order(c, L), L)), ...);
    }
  };

  template <std::size_t R>
  void run_fused() {
    using F = fused<R>;
    using info = typename F::info;
    using root = node_at<R>;
    using T = typename root::dtype;
    const rt_shape& it = shapes_[info::iteration_node];
    const dim_t total = it.numel();
    T* out = reinterpret_cast<T*>(buf_[R]);
    typename F::ctx c;
    c.key = key_;
    kernel::loop_layout<F::K> layout;
    layout.rank = it.rank;
    for (std::size_t d = 0; d < it.rank; ++d) layout.dims[d] = it.d[d];
    bool all_same = info::nreductions == 0;
    for (std::size_t k = 0; k < info::ninputs; ++k) {
      c.ptr[k] = buf_[info::info.input[k]];
      const rt_shape& s = shapes_[info::info.input[k]];
      layout.set_slot(k, s.rank, s.d);
      all_same = all_same && s == it;
    }
    if (total == 0) return;
    constexpr bool row_reduce = root::kind == node_kind::reduce && table.node[R].row_reduction;
    constexpr bool generic_reduce = root::kind == node_kind::reduce && !table.node[R].row_reduction;
    // A loop over rows of the last dim; one flat row for an elementwise group
    // whose inputs all have the loop's shape and all advance along it.
    constexpr bool inputs_advance = [] {
      bool all = true;
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        ((all = all && detail::advances_inner<node_at<info::info.input[K]>>), ...);
      }(std::make_index_sequence<info::ninputs>{});
      return all;
    }();
    const bool flat = inputs_advance && all_same && !row_reduce && !generic_reduce && !info::index_aware;
    const dim_t L = flat ? total : it.last();
    const dim_t rows = total / (L ? L : 1);

    dim_t out_stride[max_rank]{};
    double* acc = acc_.data();
    dim_t out_count = 1;
    if constexpr (generic_reduce) {
      loop_strides(shapes_[R], it, out_stride);
      out_count = shapes_[R].numel();
      std::fill(acc, acc + out_count, root::op::template identity<double>());
    }
    for (dim_t row = 0; row < rows; ++row) {
      if (!flat) layout.enter_row(c, row);  // flat: one row, every base 0
      const dim_t out_base = generic_reduce ? layout.row_offset(row, out_stride) : 0;
      F::inline_reductions(c, L, kernel::reductions_t<Step, R>{});
      if constexpr (row_reduce) {
        using rr = typename F::template root_reduction<typename root::op>;
        out[row] = store_as<T>(rr::value_of(rr::combine_in_order(c, L), L));
      } else if constexpr (generic_reduce) {
        using Op = typename root::op;
        if constexpr (detail::advances_inner<root>) {
          for (dim_t j = 0; j < L; ++j)
            acc[out_base + j] = Op::combine(acc[out_base + j], static_cast<double>(F::body::value(c, j)));
        } else {
          acc[out_base] = Op::combine(acc[out_base], F::template root_reduction<Op>::combine_in_order(c, L));
        }
      } else {
        // Blocks of 16 with no loop-carried dependence: the inlined expression
        // vectorizes (outputs never alias the group's inputs).
        T* o = out + row * L;
        dim_t j = 0;
        for (; j + 16 <= L; j += 16) {
#pragma GCC ivdep
          for (dim_t u = 0; u < 16; ++u) o[j + u] = store_as<T>(F::body::value(c, j + u));
        }
        for (; j < L; ++j) o[j] = store_as<T>(F::body::value(c, j));
      }
    }
    if constexpr (generic_reduce) {
      const double count = static_cast<double>(total) / static_cast<double>(out_count);
      for (dim_t i = 0; i < out_count; ++i) out[i] = store_as<T>(root::op::finalize(acc[i], count));
    }
  }

  // Batched matmul: each batch is C[M,N] = A[M,K] B[K,N], accumulated in f32 (f64 for f64).
  template <std::size_t R>
  void run_matmul() {
    using node = node_at<R>;
    constexpr std::size_t ia = table.node[R].child[0], ib = table.node[R].child[1];
    using TA = typename node_at<ia>::dtype;
    using TB = typename node_at<ib>::dtype;
    using TC = typename node::dtype;
    const rt_shape &sa = shapes_[ia], &sb = shapes_[ib], &sc = shapes_[R];
    const dim_t M = sc.d[sc.rank - 2], Nn = sc.d[sc.rank - 1], K = sa.d[sa.rank - 1];
    rt_shape batch = sc;
    batch.rank -= 2;
    rt_shape ba = sa, bb = sb;
    ba.rank -= 2;
    bb.rank -= 2;
    dim_t stride_a[max_rank]{}, stride_b[max_rank]{};
    loop_strides(ba, batch, stride_a);
    loop_strides(bb, batch, stride_b);
    const dim_t nbatch = batch.numel();
    const TA* A = reinterpret_cast<const TA*>(buf_[ia]);
    const TB* B = reinterpret_cast<const TB*>(buf_[ib]);
    TC* Cout = reinterpret_cast<TC*>(buf_[R]);
    for (dim_t b = 0; b < nbatch; ++b) {
      dim_t oa = 0, ob = 0, rest = b;
      for (std::size_t d = batch.rank; d-- > 0;) {
        const dim_t idx = rest % batch.d[d];
        rest /= batch.d[d];
        oa += idx * stride_a[d];
        ob += idx * stride_b[d];
      }
      const TA* a = A + oa * M * K;
      const TB* bm = B + ob * K * Nn;
      gemm(M, Nn, K, a, bm, Cout + b * M * Nn, gemm_ws_);
    }
  }

  template <std::size_t R>
  void run_transpose() {
    using T = typename node_at<R>::dtype;
    constexpr std::size_t ix = table.node[R].child[0];
    const rt_shape& s = shapes_[ix];
    const dim_t rows = s.d[s.rank - 2], cols = s.d[s.rank - 1];
    const dim_t nbatch = rows * cols > 0 ? s.numel() / (rows * cols) : 0;
    const T* x = reinterpret_cast<const T*>(buf_[ix]);
    T* out = reinterpret_cast<T*>(buf_[R]);
    for (dim_t b = 0; b < nbatch; ++b)
      for (dim_t i = 0; i < rows; ++i)
        for (dim_t j = 0; j < cols; ++j) out[b * rows * cols + j * rows + i] = x[b * rows * cols + i * cols + j];
  }

  // The rows an index tensor picks, checked against the table's row count.
  template <std::size_t Table, std::size_t Ids>
  const i32* checked_ids(dim_t table_rows) const {
    const i32* ids = reinterpret_cast<const i32*>(buf_[Ids]);
    const dim_t n = shapes_[Ids].numel();
    for (dim_t i = 0; i < n; ++i) {
      if (ids[i] >= 0 && ids[i] < table_rows) continue;
      std::string table = "a table";
      if constexpr (is_leaf_v<node_at<Table>>) table = std::string("'") + node_at<Table>::name.c_str() + "'";
      std::string where;
      if constexpr (is_leaf_v<node_at<Ids>>) where = std::string(" of input '") + node_at<Ids>::name.c_str() + "'";
      throw error("ctg: index " + std::to_string(ids[i]) + " at position " + std::to_string(i) + where +
                  " is outside the " + std::to_string(table_rows) + " rows of " + table);
    }
    return ids;
  }

  template <std::size_t R>
  void run_gather() {
    using T = typename node_at<R>::dtype;
    constexpr std::size_t it = table.node[R].child[0], ii = table.node[R].child[1];
    const rt_shape& ts = shapes_[it];
    const dim_t rows = ts.d[0], row_len = rows ? ts.numel() / rows : 0;
    const i32* ids = checked_ids<it, ii>(rows);
    const T* src = reinterpret_cast<const T*>(buf_[it]);
    T* out = reinterpret_cast<T*>(buf_[R]);
    const dim_t n = shapes_[ii].numel();
    for (dim_t i = 0; i < n; ++i) std::memcpy(out + i * row_len, src + ids[i] * row_len, row_len * sizeof(T));
  }

  template <std::size_t R>
  void run_scatter_add() {
    using TO = typename node_at<R>::dtype;  // the compute type: every row adds in it, rounded once later
    constexpr std::size_t ig = table.node[R].child[0], ii = table.node[R].child[1];
    using TG = typename node_at<ig>::dtype;
    const rt_shape& os = shapes_[R];
    const dim_t rows = os.d[0], row_len = rows ? os.numel() / rows : 0;
    const i32* ids = checked_ids<R, ii>(rows);
    const TG* g = reinterpret_cast<const TG*>(buf_[ig]);
    TO* out = reinterpret_cast<TO*>(buf_[R]);
    std::fill(out, out + os.numel(), TO(0));
    const dim_t n = shapes_[ii].numel();
    for (dim_t i = 0; i < n; ++i) {
      TO* o = out + ids[i] * row_len;
      const TG* gi = g + i * row_len;
      for (dim_t k = 0; k < row_len; ++k) o[k] += static_cast<TO>(load_as<TG>(gi[k]));
    }
  }

  // --------------------------------------------------------------- fp8 ----
  // Is L the scale of a delayed quantizer of this step (or, stacked, of a block's)?
  template <class L>
  static consteval bool is_scale_leaf() {
    constexpr std::string_view name = L::name.c_str(), tail = ".scale";
    return name.size() >= tail.size() && name.substr(name.size() - tail.size()) == tail &&
           std::is_same_v<typename L::dtype, f32>;
  }

  // A quantized buffer holds the payload, then (64-byte aligned) its amax,
  // scale and scale_inv, which fp8_matmul and dequantize read.
  static constexpr std::size_t fp8_side_bytes = 64;
  template <std::size_t I>
  float* fp8_side() const {
    return reinterpret_cast<float*>(buf_[I] + align_up(static_cast<std::size_t>(shapes_[I].numel())));
  }

  // The quantize nodes with delayed scaling, each with a slot for the amax
  // this step's forward (or backward) took, applied to its state at commit.
  struct delayed_table {
    std::size_t node[N + 1]{};
    std::size_t slot[N + 1]{};
    std::size_t count = 0;
  };
  static constexpr delayed_table delayed_quantizers = []<class... Ns>(tl::list<Ns...>) {
    delayed_table d;
    std::size_t i = 0;
    auto one = [&]<class Q>(std::type_identity<Q>) {
      if constexpr (Q::kind == node_kind::quantize)
        if constexpr (Q::scaling::is_delayed) {
          d.slot[i] = d.count;
          d.node[d.count++] = i;
        }
      ++i;
    };
    (one(std::type_identity<Ns>{}), ...);
    return d;
  }(nodes{});

  // One loop takes the amax and writes the payload (delayed: the stored
  // scale); current scaling takes the amax first, then the scale from it.
  // `record`: this run is not a recompute, so its amax goes to the state update.
  template <std::size_t R>
  void run_quantize(bool record) {
    using node = node_at<R>;
    using Fmt = typename node::dtype;
    using S = typename node::scaling;
    constexpr std::size_t ix = table.node[R].child[0];
    using TX = typename node_at<ix>::dtype;
    const std::size_t n = static_cast<std::size_t>(shapes_[R].numel());
    const TX* x = reinterpret_cast<const TX*>(buf_[ix]);
    Fmt* q = reinterpret_cast<Fmt*>(buf_[R]);
    float amax = 0.0f;
    auto take = [&](float v) {
      const float a = std::fabs(v);
      if (a > amax || a != a) amax = a;  // a NaN stays: the scale is then kept (delayed) or 1 (current)
    };
    float scale = 1.0f;
    if constexpr (S::is_delayed) {
      scale = *reinterpret_cast<const float*>(buf_[tl::index_of_v<typename S::scale_leaf, nodes>]);
      for (std::size_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(load_as<TX>(x[i]));
        take(v);
        q[i] = fp8_scaling::quantize<Fmt>(v, scale);
      }
      if (record) pending_amax_[delayed_quantizers.slot[R]] = amax;
    } else {
      for (std::size_t i = 0; i < n; ++i) take(static_cast<float>(load_as<TX>(x[i])));
      if (std::isfinite(amax)) scale = fp8_scaling::current_scale(amax, node::fp8_max, S::margin);
      for (std::size_t i = 0; i < n; ++i) q[i] = fp8_scaling::quantize<Fmt>(static_cast<float>(load_as<TX>(x[i])), scale);
    }
    float* side = fp8_side<R>();
    side[0] = amax;
    side[1] = scale;
    side[2] = 1.0f / scale;
  }

  template <std::size_t R>
  void run_dequantize() {
    using T = typename node_at<R>::dtype;
    constexpr std::size_t iq = table.node[R].child[0];
    using Fmt = typename node_at<iq>::dtype;
    const std::size_t n = static_cast<std::size_t>(shapes_[R].numel());
    const Fmt* q = reinterpret_cast<const Fmt*>(buf_[iq]);
    const float scale_inv = fp8_side<iq>()[2];
    T* out = reinterpret_cast<T*>(buf_[R]);
    for (std::size_t i = 0; i < n; ++i) out[i] = store_as<T>(fp8_scaling::dequantize<Fmt>(q[i], scale_inv));
  }

  // Each batch: the payloads converted to f32 (exactly), multiplied and summed
  // in f32 by cpu::gemm (one FMA chain per output, in k order), times
  // scale_inv(A) * scale_inv(B), rounded once to the result type.
  template <std::size_t R>
  void run_fp8_matmul() {
    using node = node_at<R>;
    constexpr std::size_t ia = table.node[R].child[0], ib = table.node[R].child[1];
    using QA = typename node_at<ia>::dtype;
    using QB = typename node_at<ib>::dtype;
    using TC = typename node::dtype;
    rt_shape sa = shapes_[ia], sb = shapes_[ib];
    const rt_shape& sc = shapes_[R];
    const dim_t M = sc.d[sc.rank - 2], Nn = sc.d[sc.rank - 1];
    const dim_t K = node::transpose_a ? sa.d[sa.rank - 2] : sa.d[sa.rank - 1];
    rt_shape batch = sc;
    batch.rank -= 2;
    sa.rank -= 2;
    sb.rank -= 2;
    dim_t stride_a[max_rank]{}, stride_b[max_rank]{};
    loop_strides(sa, batch, stride_a);
    loop_strides(sb, batch, stride_b);
    const QA* A = reinterpret_cast<const QA*>(buf_[ia]);
    const QB* B = reinterpret_cast<const QB*>(buf_[ib]);
    TC* Cout = reinterpret_cast<TC*>(buf_[R]);
    const float scale = fp8_side<ia>()[2] * fp8_side<ib>()[2];
    fp8_a_.resize(static_cast<std::size_t>(M * K));
    fp8_b_.resize(static_cast<std::size_t>(K * Nn));
    accf_.resize(std::max<std::size_t>(accf_.size(), static_cast<std::size_t>(M * Nn)));
    for (dim_t b = 0, nbatch = batch.numel(); b < nbatch; ++b) {
      dim_t oa = 0, ob = 0, rest = b;
      for (std::size_t d = batch.rank; d-- > 0;) {
        const dim_t idx = rest % batch.d[d];
        rest /= batch.d[d];
        oa += idx * stride_a[d];
        ob += idx * stride_b[d];
      }
      const QA* a = A + oa * M * K;
      const QB* bm = B + ob * K * Nn;
      for (dim_t i = 0; i < M; ++i)  // a_f32[i][k]
        for (dim_t k = 0; k < K; ++k)
          fp8_a_[i * K + k] = to_float(node::transpose_a ? a[k * M + i] : a[i * K + k]);
      for (dim_t k = 0; k < K; ++k)  // b_f32[k][j]
        for (dim_t j = 0; j < Nn; ++j)
          fp8_b_[k * Nn + j] = to_float(node::transpose_b ? bm[j * K + k] : bm[k * Nn + j]);
      float* acc = accf_.data();
      gemm(M, Nn, K, fp8_a_.data(), fp8_b_.data(), acc, gemm_ws_);
      TC* cm = Cout + b * M * Nn;
      for (dim_t i = 0, n = M * Nn; i < n; ++i) cm[i] = store_as<TC>(acc[i] * scale);
    }
  }

  // After a successful step: each delayed quantizer's amax into history slot
  // 0, then TransformerEngine's update of scale and history.
  template <class Q, class ScaleLeaf, class HistoryLeaf>
  void update_delayed(float amax, std::size_t layer) {
    using S = typename Q::scaling;
    constexpr std::size_t h = S::recipe::history;
    float* hist = param<HistoryLeaf>().data() + layer * h;
    float& scale = param<ScaleLeaf>()[layer];
    hist[0] = amax;
    fp8_scaling::delayed_update(hist, h, scale, Q::fp8_max, S::margin, S::recipe::algo);
  }
  void update_state() {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (update_delayed<node_at<delayed_quantizers.node[K]>, typename node_at<delayed_quantizers.node[K]>::scaling::scale_leaf,
                      typename node_at<delayed_quantizers.node[K]>::scaling::history_leaf>(pending_amax_[K], 0),
       ...);
    }(std::make_index_sequence<delayed_quantizers.count>{});
    std::apply([&](auto&... rt) { (update_stack_state(rt), ...); }, stacks_);
  }

  // ------------------------------------------------------------ stacks ----
  // Each stack node owns a store for its block's graph (forward and
  // backward parts, compiled once whatever the number of layers) and the
  // area where each layer's kept values live between the two parts (one
  // layer's worth when the stack recomputes).
  template <class S>
  struct stack_runtime {
    using stack_type = S;
    using block_store = store<typename S::backward_step>;
    static constexpr std::size_t layers_kept = S::recompute ? 1 : S::layers;
    static constexpr std::size_t quantizers = block_store::delayed_quantizers.count;
    block_store block;
    arena kept;
    std::size_t kept_stride = 0;
    std::array<float, S::layers * quantizers + 1> pending{};  // [layer][quantizer] amaxes of this step

    // Layer i's amaxes of one part of the block (forward: quantizers of forward nodes).
    void take_amaxes(std::size_t layer, bool forward_part) {
      constexpr auto& d = block_store::delayed_quantizers;
      for (std::size_t k = 0; k < quantizers; ++k)
        if ((d.node[k] < block_store::ptab.forward_end) == forward_part)
          pending[layer * quantizers + k] = block.pending_amax_[k];
    }
  };
  template <class RT>
  void update_stack_state(RT& rt) {
    using S = typename RT::stack_type;
    using B = typename RT::block_store;
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      auto one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
        using Q = typename B::template node_at<B::delayed_quantizers.node[J]>;
        using scale_leaf = typename detail::stacked_leaf<S::layers, typename Q::scaling::scale_leaf>::type;
        using history_leaf = typename detail::stacked_leaf<S::layers, typename Q::scaling::history_leaf>::type;
        for (std::size_t i = 0; i < S::layers; ++i)
          update_delayed<Q, scale_leaf, history_leaf>(rt.pending[i * RT::quantizers + J], i);
      };
      (one(std::integral_constant<std::size_t, K>{}), ...);
      (void)one;
    }(std::make_index_sequence<RT::quantizers>{});
  }
  template <class... Ns>
  static auto stack_runtimes(tl::list<Ns...>)
      -> tl::apply<std::tuple, tl::concat_t<std::conditional_t<Ns::kind == node_kind::stack,
                                                                 tl::list<stack_runtime<Ns>>, tl::list<>>...>>::type;

  std::size_t stack_kept_bytes() const {
    return std::apply([](const auto&... rt) { return (std::size_t(0) + ... + (rt.kept_stride * rt.layers_kept)); },
                      stacks_);
  }

  // Copy layer `layer` of every stacked leaf into the block store's own leaf.
  template <class S, class Inner>
  void load_layer(Inner& inner, std::size_t layer) {
    [&]<class... Ls>(tl::list<Ls...>) {
      auto one = [&]<class L>(std::type_identity<L>) {
        using stacked = typename detail::stacked_leaf<S::layers, L>::type;
        const std::size_t bytes = numel_of<L>() * sizeof(typename L::dtype);
        std::memcpy(inner.template param<L>().data(), buf_[tl::index_of_v<stacked, nodes>] + layer * bytes, bytes);
      };
      (one(std::type_identity<Ls>{}), ...);
    }(typename S::leaves{});
  }

  // A feed of `data` to leaf L whose shape is that of node I.
  template <class L, std::size_t I, class T>
  feed_t<L> feed_like(const T* data) const {
    feed_t<L> f{std::span<const T>(data, static_cast<std::size_t>(shapes_[I].numel())), {}};
    for (std::size_t d = 0, k = 0; d < L::dims::rank; ++d)
      if (L::dims::dims[d] == dyn) f.dyn_dims[k++] = shapes_[I].d[d];
    return f;
  }

  // Size the area a stack's layers keep their values in, for this run's shapes.
  template <std::size_t R>
  void plan_stack() {
    using S = node_at<R>;
    auto& rt = std::get<stack_runtime<S>>(stacks_);
    const auto* in = reinterpret_cast<const typename S::dtype*>(buf_[table.node[R].child[0]]);
    rt.kept_stride = align_up(rt.block.plan(feed_like<typename S::carry, R>(in), feed_like<typename S::upstream, R>(in)));
    rt.kept.reserve(rt.kept_stride * rt.layers_kept + 64);
  }
  template <std::size_t... I>
  void plan_stacks(std::index_sequence<I...>) {
    auto one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      if constexpr (node_at<J>::kind == node_kind::stack) plan_stack<J>();
    };
    (one(std::integral_constant<std::size_t, I>{}), ...);
    (void)one;
  }

  // Forward: layer i reads x_i and writes x_{i+1}. The buffer keeps the output
  // x_N in slot 0 and the inputs x_1 .. x_{N-1} in slots 1 .. N-1 for backward.
  // (The forward part never reads the upstream gradient; it is fed x_i for its shape.)
  template <std::size_t R>
  void run_stack() {
    using S = node_at<R>;
    using T = typename S::dtype;
    constexpr std::size_t ix = table.node[R].child[0];
    auto& rt = std::get<stack_runtime<S>>(stacks_);
    const std::size_t n = static_cast<std::size_t>(shapes_[R].numel());
    T* slots = reinterpret_cast<T*>(buf_[R]);
    const T* in = reinterpret_cast<const T*>(buf_[ix]);
    for (std::size_t i = 0; i < S::layers; ++i) {
      load_layer<S>(rt.block, i);
      rt.block.key_ = {key_.seed, key_.step, static_cast<std::uint32_t>(i)};
      const auto carry = feed_like<typename S::carry, R>(in);
      const auto up = feed_like<typename S::upstream, R>(in);
      if (i == 0) plan_stack<R>();
      rt.block.run_forward_part(rt.kept.data() + (S::recompute ? 0 : i * rt.kept_stride), carry, up);
      rt.take_amaxes(i, true);
      T* next = slots + (i + 1 == S::layers ? 0 : (i + 1) * n);
      std::memcpy(next, rt.block.template value_of<typename S::block_out>().data(), n * sizeof(T));
      in = next;
    }
  }

  // Backward: for i = N-1 .. 0, the block's backward part at x_i (after
  // running its forward part again, when the stack recomputes) turns the
  // gradient of x_{i+1} into that of x_i and gives layer i's parameter gradients.
  template <std::size_t R>
  void run_stack_grad() {
    using GN = node_at<R>;
    using S = typename GN::stack;
    using T = typename S::dtype;
    constexpr std::size_t is = table.node[R].child[0], ig = table.node[R].child[1];
    constexpr std::size_t ix = table.node[is].child[0];
    auto& rt = std::get<stack_runtime<S>>(stacks_);
    const std::size_t n = static_cast<std::size_t>(shapes_[R].numel());
    const T* slots = reinterpret_cast<const T*>(buf_[is]);
    T* gx = reinterpret_cast<T*>(buf_[R] + GN::leading_bytes);
    const T* g = reinterpret_cast<const T*>(buf_[ig]);
    for (std::size_t i = S::layers; i-- > 0;) {
      const T* in = i == 0 ? reinterpret_cast<const T*>(buf_[ix]) : slots + i * n;
      load_layer<S>(rt.block, i);
      rt.block.key_ = {key_.seed, key_.step, static_cast<std::uint32_t>(i)};
      const auto carry = feed_like<typename S::carry, R>(in);
      const auto up = feed_like<typename S::upstream, R>(g);
      if constexpr (S::recompute) rt.block.run_recomputing(rt.kept.data(), carry, up);
      else rt.block.run_backward_part(rt.kept.data() + i * rt.kept_stride, carry, up);
      rt.take_amaxes(i, false);
      [&]<class... Ps>(tl::list<Ps...>) {
        std::size_t k = 0;
        auto one = [&]<class P>(std::type_identity<P>) {
          constexpr std::size_t leaf = tl::index_of_v<P, typename S::leaves>;
          const std::size_t bytes = numel_of<P>() * sizeof(typename P::dtype);
          std::memcpy(buf_[R] + GN::offset_of(leaf) + i * bytes, rt.block.output_bytes(k + 2), bytes);
          ++k;
        };
        (one(std::type_identity<Ps>{}), ...);
      }(typename S::trainable{});
      std::memcpy(gx, rt.block.template output<1>().data(), n * sizeof(T));
      g = gx;
    }
  }
  // ----------------------------------------------------------- commit ----
  float commit() {
    using loss = tl::at_t<0, typename Step::outputs>;
    constexpr std::size_t il = tl::index_of_v<loss, nodes>;
    const auto* lp = reinterpret_cast<const typename loss::dtype*>(buf_[il]);
    const std::size_t count = static_cast<std::size_t>(shapes_[il].numel());
    const float first = count ? static_cast<float>(load_as(lp[0])) : 0.0f;
    if (check_finite_) {
      for (std::size_t i = 0; i < count; ++i)
        if (!std::isfinite(static_cast<double>(load_as(lp[i]))))
          throw error("ctg: the loss is not finite (" + std::to_string(static_cast<double>(load_as(lp[i]))) +
                      "); nothing was written");
    }
    // Nothing visible changes before this point. The first output was computed
    // into the unpublished buffer (a leaf output is copied there); publish it.
    if constexpr (!ptab.owns[il]) {
      out_[1 - published_].reserve(align_up(count * sizeof(typename loss::dtype) + 1));
      std::memcpy(out_[1 - published_].data(), lp, count * sizeof(typename loss::dtype));
    }
    published_ = 1 - published_;
    ++key_.step;
    value_count_ = count;
    copy_grads(std::make_index_sequence<Step::wrt::size>{});
    update_state();
    return first;
  }

  template <std::size_t... W>
  void copy_grads(std::index_sequence<W...>) {
    auto one = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      using L = tl::at_t<K, typename Step::wrt>;
      using G = tl::at_t<K + 1, typename Step::outputs>;
      constexpr std::size_t ig = tl::index_of_v<G, nodes>;
      constexpr std::size_t il = tl::index_of_v<L, nodes>;
      if constexpr (stored_leaf<L>())  // a stack carry's gradient is read with output<K>()
        std::memcpy(grads_.data() + layout.grad_offset[il], buf_[ig], numel_of<L>() * sizeof(typename L::dtype));
    };
    (one(std::integral_constant<std::size_t, W>{}), ...);
    (void)one;
  }

  arena params_, grads_, scratch_;
  std::array<std::size_t, N> bytes_{};                    // each buffer's size in the current placement
  std::array<std::array<std::size_t, 2>, N> offset_{};    // each life's offset in its pool
  std::size_t kept_bytes_ = 0, rest_bytes_ = 0;            // the two pools
  std::byte* kept_area_ = nullptr;                         // the kept pool, when the caller provides it
  bool recomputing_ = false;                               // running a forward part again: write no state
  random_key key_{};
  template <class>
  friend class store;  // a stack's block store gets its layer's key
  decltype(stack_runtimes(nodes{})) stacks_;
  arena out_[2];  // the first output: published (value()) and being computed
  std::size_t published_ = 0, value_count_ = 0;
  std::array<std::byte*, N> buf_{};
  std::array<rt_shape, N> shapes_{};
  std::vector<double> acc_;
  std::vector<float> accf_, fp8_a_, fp8_b_;
  gemm_workspace gemm_ws_;
  std::array<float, delayed_quantizers.count + 1> pending_amax_{};
  bool check_finite_ = false;
};

}  // namespace cpu

template <class Outputs, class Wrt, bool Fuse>
cpu::store<graph_step<Outputs, Wrt, Fuse>> make_store(cpu::device, graph_step<Outputs, Wrt, Fuse>) {
  return {};
}
// After a failed value_and_grad check (already reported), add no errors of its own.
inline invalid_step make_store(cpu::device, invalid_step) { return {}; }

}  // namespace ctg

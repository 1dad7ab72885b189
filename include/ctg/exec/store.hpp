#pragma once
// A store runs one compiled step (graph/autodiff.hpp's graph_step) on one
// backend, and holds everything the step needs between runs: parameters,
// gradients, FP8 state, scratch. Everything here is backend-neutral; a
// backend (exec/cpu/store.hpp) supplies memory, copies and one runner per
// group kind:
//
//   struct Backend {
//     using arena = ...;      // reserve(bytes) (zero-filled), data(), size()
//     using workspace = ...;  // scratch the runners reuse; reserve_for(axis_reduce_elements)
//     static void copy(std::byte* dst, const std::byte* src, std::size_t bytes);  // within its memory
//     static void upload(std::byte* dst, const void* src, std::size_t bytes);    // host -> its memory
//     static void download(void* dst, const std::byte* src, std::size_t bytes);  // its memory -> host
//     static std::byte* bind_input(const void* fed, std::size_t bytes);           // a fed input's buffer
//     template <class Key, std::size_t R> static void run_group(const bindings<N>&, workspace&);
//     template <class Key, std::size_t R> static void run_quantize(const bindings<N>&, workspace&, float* amax);
//     static void delayed_update(float* history, std::size_t length, float* scale, const float* amax,
//                                float fp8_max, int margin, fp8_scaling::amax_algo algo);
//     template <class T> static void accumulate(std::byte* dst, const std::byte* src, std::size_t n);  // dst += src
//   };
//
// A run: bind the feeds and resolve shapes, place buffers (exec/buffers.hpp),
// run the program's positions in order (entering a checkpoint region's
// recompute where the program says, a stack through exec/stack_runner.hpp),
// then commit: check the loss if asked, publish it, copy (or, within a set of
// micro-batches, add) the gradients, count the step and update the FP8 state.
// Nothing a user can read changes before the commit, so a step that throws
// changes nothing.
#include <cmath>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <ctg/exec/buffers.hpp>
#include <ctg/exec/fp8_state.hpp>
#include <ctg/exec/index_checks.hpp>
#include <ctg/exec/micro_batch_set.hpp>
#include <ctg/exec/stack_runner.hpp>
#include <ctg/graph/autodiff.hpp>

namespace ctg {

// Key: the step's key (step_key_t<Step>, graph/step.hpp): the store and
// everything it instantiates are named after the key, never after the step's
// graph type (short symbol names, debug information and compiler memory).
template <class Backend, class Key>
class basic_store {
 public:
  using Step = step_of<Key>;
  using step_type = Step;
  using backend_type = Backend;
  using nodes = typename Step::nodes;
  static constexpr std::size_t N = nodes::size;
  static constexpr const auto& table = schedule<Key>::table;
  static constexpr const auto& prog = program<Key>::table;

  // Parameters start at 0; state leaves at the value their type declares
  // (an FP8 scale at 1, its amax history at 0).
  basic_store() {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      auto one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
        if constexpr (requires { tl::at_t<J, nodes>::initial_value; }) {
          using L = tl::at_t<J, nodes>;  // a leaf: a short type
          const std::vector<typename L::dtype> v(L::dims::static_numel, store_as<typename L::dtype>(L::initial_value));
          Backend::upload(mem_.param_bytes(J), v.data(), v.size() * sizeof(typename L::dtype));
        }
      };
      (one(std::integral_constant<std::size_t, I>{}), ...);
      (void)one;
    }(std::make_index_sequence<N>{});
  }

  // The values of a stored leaf (trainable, frozen or state): read, write, initialise.
  template <class L>
  std::span<typename L::dtype> param() {
    static_assert(tl::contains_v<L, nodes>, "ctg: this leaf is not part of the step's graph");
    static_assert(!tl::contains_v<L, nodes> || detail::stored_leaf<L>(),
                  "ctg: inputs are fed, not stored: use ctg::feed<X>");
    return {reinterpret_cast<typename L::dtype*>(mem_.param_bytes(tl::index_of_v<L, nodes>)), L::dims::static_numel};
  }

  // The gradient of L from the last successful step.
  template <class L>
  std::span<const typename L::dtype> grad() {
    constexpr bool frozen = detail::stored_leaf<L>() && L::role == leaf_role::frozen;
    static_assert(!frozen, "ctg: frozen parameter: a frozen leaf has no gradient");
    static_assert(frozen || tl::contains_v<L, typename Step::wrt>,
                  "ctg: no gradient path: this leaf is not in the step's wrt<...>");
    return {reinterpret_cast<const typename L::dtype*>(mem_.grad_bytes(tl::index_of_v<L, nodes>)),
            L::dims::static_numel};
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

  // Copies between the host and a stored leaf, in the leaf's dtype; a span
  // of another size is a ctg::error and copies nothing.
  template <class L>
    requires is_leaf_v<L>
  void upload(L, std::span<const typename L::dtype> host) {
    check_host_size<L>(host.size());
    Backend::upload(reinterpret_cast<std::byte*>(param<L>().data()), host.data(), host.size_bytes());
  }
  template <class L>
    requires is_leaf_v<L>
  void download(L, std::span<typename L::dtype> host) {
    check_host_size<L>(host.size());
    Backend::download(host.data(), reinterpret_cast<const std::byte*>(param<L>().data()), host.size_bytes());
  }

  // The value of the step's first output (the loss, or forward(e)'s e) after the last step.
  auto value() const {
    using T = typename tl::at_t<0, typename Step::outputs>::dtype;
    return std::span<const T>(reinterpret_cast<const T*>(mem_.published()), mem_.published_count());
  }

  // Dropout's random stream: a seed (0 unless set), and the count of
  // successful steps, which keys each step's masks (state: it changes once
  // per step, after backward).
  void seed(std::uint64_t s) { key_.seed = s; }
  std::uint64_t seed() const { return key_.seed; }
  std::uint32_t steps_run() const { return key_.step; }
  void set_steps_run(std::uint32_t n) { key_.step = n; }

  // When on, a step whose loss is not finite throws ctg::error and changes nothing.
  void check_finite(bool on) { check_finite_ = on; }

  // Gradient accumulation (exec/micro_batch_set.hpp): the next steps come in
  // sets of k micro-batches; once a set is complete, grad<L>() holds the mean
  // of their gradients (each step's backward starts from 1/k, and the steps
  // add up), and the FP8 scaling states have updated once, from the max of
  // the set's amaxes. k = 1 (the default): every step is a set. Changing k
  // while a set is under way throws ctg::error and changes nothing.
  void accumulate(std::uint32_t k) { acc_.set(k); }
  std::uint32_t micro_batches() const { return acc_.size(); }
  // Micro-batches in the current set (k when complete; 0 once consumed).
  std::uint32_t accumulated() const { return acc_.accumulated(); }
  // What an optimizer calls once it has applied a complete set (checked
  // before it changed anything): the next step starts a new set.
  void consume_grads() {
    if (!acc_.complete())
      throw error("ctg: consume_grads: the gradients hold " + acc_.progress() + "; only a complete set is consumed");
    acc_.consume();
  }

  // Run one step: check the feeds (which at compile time; their sizes and
  // index values at run time), resolve shapes, run every group, then commit.
  template <class... Feeds>
  CTG_NOINLINE float run(const Feeds&... feeds) {
    [[maybe_unused]] constexpr bool fed =
        detail::check_feeds<typename step_buffers<Backend, Key>::inputs, typename Feeds::leaf...>();
    detail::check_ids<Key>(feeds...);
    prepare(nullptr, feeds...);
    run_positions<0, prog.len>();
    return commit();
  }

  // Bytes of the forward values kept for backward, and of all scratch
  // buffers, as placed for the last run (or plan); a stack's layers count
  // with all they keep.
  std::size_t kept_bytes() const { return mem_.kept_bytes() + stack_kept_bytes(); }
  std::size_t scratch_bytes() const { return mem_.scratch_bytes() + stack_kept_bytes(); }

  // Place every buffer for these feeds without running: returns kept_bytes().
  template <class... Feeds>
  std::size_t plan(const Feeds&... feeds) {
    [[maybe_unused]] constexpr bool fed =
        detail::check_feeds<typename step_buffers<Backend, Key>::inputs, typename Feeds::leaf...>();
    prepare(nullptr, feeds...);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      auto one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
        if constexpr (tl::at_t<J, nodes>::kind == node_kind::stack)
          std::get<stack_runner<Backend, Key, J>>(stacks_).plan(*this);
      };
      (one(std::integral_constant<std::size_t, I>{}), ...);
      (void)one;
    }(std::make_index_sequence<N>{});
    return kept_bytes();
  }

 private:
  // A stack drives its block's store through the protocol below, and reads
  // its parent's buffers, key and stacked leaves.
  template <class, class, std::size_t>
  friend class stack_runner;
  // A store over several steps binds its other steps' leaves to its own.
  template <class, class, class...>
  friend class shared_store;

  // ---------------------------------------------- the parts of a step ----
  // The forward and backward parts run apart: run_forward_part writes the
  // kept values into `kept`, and run_backward_part, given the same feeds and
  // `kept`, reads them back. Neither commits.
  template <class... Feeds>
  void run_forward_part(std::byte* kept, const Feeds&... feeds) {
    prepare(kept, feeds...);
    run_positions<0, prog.backward_begin>();
  }
  template <class... Feeds>
  void run_backward_part(std::byte* kept, const Feeds&... feeds) {
    prepare(kept, feeds...);
    run_positions<prog.backward_begin, prog.len>();
  }
  // Both parts, the forward one as a recompute (it records no state).
  template <class... Feeds>
  void run_recomputing(std::byte* kept, const Feeds&... feeds) {
    prepare(kept, feeds...);
    recomputing_ = true;
    run_positions<0, prog.backward_begin>();
    recomputing_ = false;
    run_positions<prog.backward_begin, prog.len>();
  }
  // The buffer of node I (an output, or the forward part's root) after the last run.
  template <std::size_t I>
  const std::byte* value_bytes() const {
    static_assert(table.node[I].output, "ctg: internal: value_bytes reads outputs and the forward root only");
    return mem_.bound().buf[I];
  }
  // The buffer of output K after the last run.
  template <std::size_t K>
  const std::byte* output_bytes() const {
    return mem_.bound().buf[tl::index_of_v<tl::at_t<K, typename Step::outputs>, nodes>];
  }

  template <class L>
  static void check_host_size(std::size_t n) {
    if (n != L::dims::static_numel)
      throw error(std::string("ctg: host span size differs from leaf '") + L::name.c_str() + "': " +
                  std::to_string(L::dims::static_numel) + " elements expected, " + std::to_string(n) + " given");
  }

  template <class... Feeds>
  void prepare(std::byte* kept_area, const Feeds&... feeds) {
    mem_.prepare(kept_area, feeds...);
    ws_.reserve_for(mem_.max_axis_reduce_elements());
    mem_.bound().key = key_;
    fill_runtime_scalars();
  }

  // The loss seed (1/k of the micro-batch set), and 1/count of a mean, known
  // once the run's shapes are.
  void fill_runtime_scalars() {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      auto one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
        if constexpr (tl::at_t<J, nodes>::kind == node_kind::runtime_scalar) {
          using T = typename tl::at_t<J, nodes>::dtype;
          // (a mean's children give shapes only: they are not in the table's edges; the seed has none)
          using children = typename tl::at_t<J, nodes>::children;
          double value = acc_.loss_seed();
          if constexpr (children::size == 2) {
            constexpr std::size_t big = tl::index_of_v<tl::at_t<0, children>, nodes>;
            constexpr std::size_t small = tl::index_of_v<tl::at_t<1, children>, nodes>;
            const auto& shape = mem_.bound().shape;
            value = static_cast<double>(shape[small].numel()) / static_cast<double>(shape[big].numel());
          }
          const T v = store_as<T>(value);
          Backend::upload(mem_.bound().buf[J], &v, sizeof v);
        }
      };
      (one(std::integral_constant<std::size_t, I>{}), ...);
      (void)one;
    }(std::make_index_sequence<N>{});
  }

  // ------------------------------------------------------------- run ----
  template <std::size_t From, std::size_t To>
  void run_positions() {
    [&]<std::size_t... Q>(std::index_sequence<Q...>) {
      (run_position<From + Q>(), ...);
    }(std::make_index_sequence<To - From>{});
  }
  template <std::size_t Q>
  void run_position() {
    if constexpr (prog.enter_region[Q] != detail::no_region) mem_.enter_recompute(prog.enter_region[Q]);
    constexpr std::size_t R = prog.root[Q];
    constexpr node_kind k = table.node[R].kind;
    if constexpr (k == node_kind::stack) {
      std::get<stack_runner<Backend, Key, R>>(stacks_).run_forward(*this);
    } else if constexpr (k == node_kind::stack_grad) {
      std::get<stack_runner<Backend, Key, table.child(R, 0)>>(stacks_).template run_backward<R>(*this);
    } else if constexpr (k == node_kind::quantize) {
      Backend::template run_quantize<Key, R>(mem_.bound(), ws_,
                                             fp8_.template amax_slot<R>(!recomputing_ && !prog.recompute[Q]));
    } else {
      Backend::template run_group<Key, R>(mem_.bound(), ws_);
    }
  }

  // ---------------------------------------------------------- commit ----
  float commit() {
    using T = typename tl::at_t<0, typename Step::outputs>::dtype;
    constexpr std::size_t il = tl::index_of_v<tl::at_t<0, typename Step::outputs>, nodes>;
    const std::size_t count = static_cast<std::size_t>(mem_.bound().shape[il].numel());
    std::vector<T> host(check_finite_ ? count : (count ? 1 : 0));
    Backend::download(host.data(), mem_.bound().buf[il], host.size() * sizeof(T));
    for (const T& v : host)
      if (check_finite_ && !std::isfinite(static_cast<double>(load_as(v))))
        throw error("ctg: the loss is not finite (" + std::to_string(static_cast<double>(load_as(v))) +
                    "); nothing was written");
    // Nothing visible changed before this point.
    mem_.publish(count);
    if (!on_shared_leaves_) {  // (a step on another store's leaves writes none of its state)
      ++key_.step;
      copy_grads(acc_.next_starts_set());
      fold_state();
      acc_.count_step();
      if (acc_.complete()) update_state();
    }
    return count ? static_cast<float>(load_as(host[0])) : 0.0f;
  }

  // The step's gradients into the store's: written by the first step of a
  // set of micro-batches, added by the others.
  void copy_grads(bool first) {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      auto one = [&]<std::size_t W>(std::integral_constant<std::size_t, W>) {
        using L = tl::at_t<W, typename Step::wrt>;
        if constexpr (detail::stored_leaf<L>()) {  // a stack carry's gradient is read from the output
          std::byte* dst = mem_.grad_bytes(tl::index_of_v<L, nodes>);
          const std::byte* src = output_bytes<Step::template grad_output<L>>();
          if (first) Backend::copy(dst, src, L::dims::static_numel * sizeof(typename L::dtype));
          else Backend::template accumulate<typename L::dtype>(dst, src, L::dims::static_numel);
        }
      };
      (one(std::integral_constant<std::size_t, K>{}), ...);
      (void)one;
    }(std::make_index_sequence<Step::wrt::size>{});
  }

  // After a successful run: its FP8 amaxes into each scaling state's (the max over its uses).
  void fold_state() {
    fp8_.fold();
    std::apply([&](auto&... rt) { (rt.fold_state(), ...); }, stacks_);
  }
  // When the set of micro-batches is complete: each FP8 scaling state updated once.
  void update_state() {
    fp8_.template update<Backend>([&]<class L>(std::type_identity<L>) {
      return reinterpret_cast<float*>(mem_.param_bytes(tl::index_of_v<L, nodes>));
    });
    std::apply([&](auto&... rt) { (rt.update_state(*this), ...); }, stacks_);
  }

  std::size_t stack_kept_bytes() const {
    return std::apply([](const auto&... rt) { return (std::size_t(0) + ... + rt.kept_bytes()); }, stacks_);
  }

  template <std::size_t... I>
  static auto stack_runners(std::index_sequence<I...>)
      -> tl::apply<std::tuple, tl::concat_t<std::conditional_t<table.node[I].kind == node_kind::stack,
                                                             tl::list<stack_runner<Backend, Key, I>>, tl::list<>>...>>::type;

  step_buffers<Backend, Key> mem_;
  fp8_state<Key> fp8_;
  decltype(stack_runners(std::make_index_sequence<N>{})) stacks_;
  typename Backend::workspace ws_;
  random_key key_{};
  micro_batch_set acc_;
  bool recomputing_ = false;  // running a forward part again: record no state
  bool on_shared_leaves_ = false;  // runs on another store's leaves (exec/shared_store.hpp)
  bool check_finite_ = false;
};

}  // namespace ctg

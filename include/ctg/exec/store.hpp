#pragma once
// A store runs one compiled step (graph/autodiff.hpp's graph_step) on one
// backend, and holds everything the step needs between runs: parameters,
// gradients, FP8 state, scratch. Everything here is backend-neutral; a
// backend (exec/cpu/store.hpp) supplies memory, copies and one runner per
// group kind:
//
//   struct Backend {
//     static constexpr bool host_memory = ...;  // can the host read its memory (store.param<L>())?
//     using arena = ...;      // reserve(bytes) (zero-filled), data(), size()
//     using workspace = ...;  // the device's handle and the scratch runners reuse (its stream, on a GPU)
//     // Every operation is ordered on the workspace's device (the CPU: done on return).
//     static void copy(workspace&, std::byte* dst, const std::byte* src, std::size_t bytes);  // within its memory
//     static void upload(workspace&, std::byte* dst, const void* src, std::size_t bytes);    // host -> its memory
//     static void download(workspace&, void* dst, const std::byte* src, std::size_t bytes);  // -> host, complete on return
//     // A small value (n <= 8 bytes) written in order with the runners' work.
//     static void write_value(workspace&, std::byte* dst, const std::byte* bytes, std::size_t n);
//     // Does a step replay its launches (a GPU's graphs)? If so, run them as
//     // body() or a replay of a capture, by the key of the step's bindings:
//     static constexpr bool replays_launches = ...;
//     template <class Body> static void replay_launches(workspace&, std::span<const std::byte> key, Body&&);
//     // A fed input's buffer: the fed memory itself where the device reads
//     // it, else a copy in `staging` (the input's own, kept from run to run).
//     static std::byte* bind_input(workspace&, const void* fed, std::size_t bytes, arena& staging);
//     // The runner of group R of step Key: a function instantiated on
//     // name-free types only (null for a stack's forward and backward).
//     template <class Key, std::size_t R> static consteval runner_t<workspace> runner_for();
//     // What that runner needs of the workspace's scratch, reserved before a
//     // step's first launch (null: nothing): a step allocates nothing.
//     template <class Key, std::size_t R> static consteval scratch_sizer_t<workspace> scratch_for();
//     // FP8 delayed scaling (exec/fp8_state.hpp), in its memory: a run's
//     // amaxes folded into the states', and one state's update on every layer.
//     static void fold_amaxes(workspace&, const amax_fold&);
//     static void update_fp8(workspace&, const fp8_update&);
//     template <class T> static void accumulate(workspace&, std::byte* dst, const std::byte* src, std::size_t n);  // dst += src
//     using group_clock = ...;  // times a group alone (exec/group_profile.hpp)
//   };
//
// A run: bind the feeds and resolve shapes, place buffers (exec/buffers.hpp),
// size every runner's scratch (its stacks' blocks' too), run the program's
// positions in order (entering a checkpoint region's recompute where the
// program says, a stack through exec/stack_runner.hpp), then commit: check
// the loss if asked, publish it, copy (or, within a set of micro-batches,
// add) the gradients, count the step and update the FP8 state.
// Nothing a user can read changes before the commit, so a step that throws
// changes nothing.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <concepts>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ctg/exec/buffers.hpp>
#include <ctg/exec/fp8_state.hpp>
#include <ctg/exec/group_profile.hpp>
#include <ctg/exec/index_checks.hpp>
#include <ctg/exec/micro_batch_set.hpp>
#include <ctg/exec/replica_group.hpp>
#include <ctg/exec/run_lock.hpp>
#include <ctg/exec/stack_runner.hpp>
#include <ctg/graph/autodiff.hpp>

namespace ctg {

// Key: the step's key (step_key_t<Step>, graph/step.hpp). The store runs
// its step from tables (lower/): per-node work is a loop over the node
// table, and each program position calls a runner through a pointer. The
// runners are instantiated on name-free types, so equal groups of any steps
// share them, and only the few functions here are instantiated per step.
namespace detail {
// A store's number, no other store's (an optimizer checks it is given the
// store it was made for): a copy is another store and takes a new one; a
// move takes the number along and leaves the moved-from store none (0).
class store_identity {
 public:
  store_identity() : value_(next()) {}
  store_identity(const store_identity&) : value_(next()) {}
  store_identity(store_identity&& o) noexcept : value_(std::exchange(o.value_, 0)) {}
  store_identity& operator=(const store_identity&) { return *this; }
  store_identity& operator=(store_identity&& o) noexcept {
    value_ = std::exchange(o.value_, 0);
    return *this;
  }
  std::uint64_t value() const { return value_; }

 private:
  // Each copy of ctg counts from a place of its own: a shared library built
  // with hidden symbols has a counter of its own, and two counters from 0
  // gave two live stores one number (tests/shared_library). The place is
  // the counter's own address, scrambled (splitmix64): distinct for every
  // copy loaded, and far apart.
  static std::uint64_t next() {
    static std::atomic<std::uint64_t> count{scrambled(reinterpret_cast<std::uintptr_t>(&count))};
    std::uint64_t v = ++count;
    while (v == 0) v = ++count;  // (0: moved from)
    return v;
  }
  static constexpr std::uint64_t scrambled(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }
  std::uint64_t value_;
};

// The replica group a store runs in (dist::data_parallel, which keeps a
// reference to the store). A store in a group cannot be moved or copied:
// the group would go on running the store moved from (its buffers gone).
// The store's first member, so a refused move has moved nothing.
class group_link {
 public:
  group_link() = default;
  group_link(const group_link& o) { refuse(o.group_); }
  group_link(group_link&& o) { refuse(o.group_); }
  group_link& operator=(const group_link& o) { return refuse(group_ ? group_ : o.group_), *this; }
  group_link& operator=(group_link&& o) { return refuse(group_ ? group_ : o.group_), *this; }
  group_link& operator=(replica_group* g) { return group_ = g, *this; }
  operator replica_group*() const { return group_; }
  replica_group* operator->() const { return group_; }

 private:
  static void refuse(const replica_group* g) {
    if (g)
      throw error("ctg: a store in a data_parallel cannot be moved or copied (the data_parallel runs the store it "
                  "was made with): end the data_parallel first");
  }
  replica_group* group_ = nullptr;
};

// The store's errors that name a leaf, out of line (one copy for every store).
// A stack's parameter is not in this store: dist::fsdp holds it in shards.
[[noreturn]] inline void throw_held_in_shards(const char* name) {
  throw error(std::string("ctg: parameter '") + name +
              "' is held in shards by dist::data_parallel with dist::fsdp (this rank has its own rows only): "
              "make every parameter whole with sharded_adamw's gather_whole_parameters() while the "
              "data_parallel lasts, or save a checkpoint (dist::save)");
}
// A parameter gathered as fp8 by dist::data_parallel: whole in this rank's rows only.
[[noreturn]] inline void throw_rows_only(const char* name) {
  throw error(std::string("ctg: parameter '") + name +
              "' is whole only in this rank's rows: dist::data_parallel gathers it as fp8 (shard(quantize(w))) "
              "and the optimizer updates this rank's rows of it: make it whole with sharded_adamw's "
              "gather_whole_parameters() (every rank) while the data_parallel lasts, or save a checkpoint "
              "(dist::save) and load it (io::load writes it whole)");
}
// A host span of n elements given for leaf `name` of `expected`.
[[noreturn]] inline void throw_host_size(const char* name, std::size_t expected, std::size_t n) {
  throw error(std::string("ctg: host span size differs from leaf '") + name + "': " + std::to_string(expected) +
              " elements expected, " + std::to_string(n) + " given");
}

}  // namespace detail

template <class Backend, class Key>
class basic_store {
 public:
  using Step = step_of<Key>;
  using step_type = Step;
  using result = step_result_t<typename Step::root>;  // what run returns: the loss (graph/step.hpp)
  using backend_type = Backend;
  using nodes = typename Step::nodes;
  static constexpr std::size_t N = nodes::size;
  static constexpr const auto& table = schedule<Key>::table;
  static constexpr const auto& prog = program<Key>::table;

  // Parameters start at 0; state leaves at the value their type declares
  // (an FP8 scale at 1, its amax history at 0).
  basic_store() {
    set_initial_values();
    make_amax_records();
  }
  // A store on a device whose workspace is made from it (a GPU's: its
  // stream), first, so everything the store does runs there.
  template <class Device>
    requires std::constructible_from<typename Backend::workspace, Device&>
  explicit basic_store(Device& dev) : ws_(dev) {
    set_initial_values();
    make_amax_records();
  }
  // Destroyed while a data_parallel runs it: the data_parallel is told, and
  // its own end leaves the store alone.
  ~basic_store() {
    if (group_) group_->store_ended();
  }
  basic_store(basic_store&&) = default;
  basic_store& operator=(basic_store&&) = default;
  // Another step's runner in a store over several steps (exec/shared_store.hpp),
  // bound to that store's leaves before each run: it holds none of its own
  // and writes no initial values.
  explicit basic_store(detail::on_shared_leaves tag) : mem_(tag) {
    on_shared_leaves_ = true;
    make_amax_records();
  }

  // Does the step have a node of kind k, its stacks' blocks included? (A
  // GPU store checks for fp8_matmul before it is made.)
  static consteval bool has_node_kind(node_kind k) {
    bool found = false;
    for (std::size_t i = 0; i < N; ++i) found = found || table.node[i].kind == k;
    return found || blocks_have_node_kind(static_cast<stack_runner_tuple*>(nullptr), k);
  }

  // The values of a stored leaf (trainable, frozen or state): read, write,
  // initialise (in host memory; a GPU's store copies: upload, download).
  template <class L>
  std::span<typename L::dtype> param() {
    static_assert(Backend::host_memory || !is_leaf_v<L>,
                  "ctg: this store's memory is a GPU's, which the host cannot read or write: copy with "
                  "store.upload(L{}, span), store.download(L{}, span), store.download_grad(L{}, span) and "
                  "store.download_value(span)");
    return {reinterpret_cast<typename L::dtype*>(leaf_bytes<L>()), L::dims::static_numel};
  }

  // The gradient of L from the last successful step.
  template <class L>
  std::span<const typename L::dtype> grad() {
    static_assert(Backend::host_memory || !is_leaf_v<L>,
                  "ctg: this store's memory is a GPU's, which the host cannot read or write: copy with "
                  "store.upload(L{}, span), store.download(L{}, span), store.download_grad(L{}, span) and "
                  "store.download_value(span)");
    return {reinterpret_cast<const typename L::dtype*>(grad_bytes<L>()), L::dims::static_numel};
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
    Backend::upload(ws_, stored_bytes<L>(), host.data(), host.size_bytes());
    rows_only_[tl::index_of<L, nodes>::value] = false;  // (whole again)
  }
  template <class L>
    requires is_leaf_v<L>
  void download(L, std::span<typename L::dtype> host) {
    check_host_size<L>(host.size());
    Backend::download(ws_, host.data(), leaf_bytes<L>(), host.size_bytes());
  }

  // The gradient of L from the last successful step, copied to the host.
  template <class L>
    requires is_leaf_v<L>
  void download_grad(L, std::span<typename L::dtype> host) {
    check_host_size<L>(host.size());
    Backend::download(ws_, host.data(), grad_bytes<L>(), host.size_bytes());
  }

  // Where stored leaf L's values, and its gradient, are: addresses in the
  // backend's memory (a device optimizer's kernels read them).
  template <class L>
  std::byte* leaf_bytes() {
    if (rows_only_[tl::index_of<L, nodes>::value]) detail::throw_rows_only(L::name.c_str());
    return stored_bytes<L>();
  }

  // A weight dist::data_parallel gathers as fp8 bytes on real ranks
  // (shard(quantize(w))): the steps read the gathered bytes, and the
  // optimizer updates this rank's rows of the weight only. Between steps
  // the store holds it whole in those rows only (dist/sharded_adamw.hpp
  // marks it), and reading it whole (param, download, another step or a
  // run of this store alone) is a ctg::error until it is whole again.
  template <class L>
  void hold_rows_only(bool rows_only) {
    rows_only_[tl::index_of<L, nodes>::value] = rows_only;
  }
  template <class L>
  bool holds_rows_only() const {
    return rows_only_[tl::index_of<L, nodes>::value];
  }
  // Every leaf's mark at once, by node: a load writes every leaf whole
  // (io/checkpoint.hpp), and puts the marks back if it fails.
  std::array<bool, N> rows_only_marks() const { return rows_only_; }
  void set_rows_only_marks(const std::array<bool, N>& marks) { rows_only_ = marks; }
  // L's values, whole or not: the optimizer's access to its own rows.
  template <class L>
  std::span<typename L::dtype> own_rows() {
    return {reinterpret_cast<typename L::dtype*>(stored_bytes<L>()), L::dims::static_numel};
  }
  template <class L>
  std::byte* grad_bytes() {
    constexpr bool frozen = detail::stored_leaf<L>() && L::role == leaf_role::frozen;
    constexpr bool input = [] {
      if constexpr (is_leaf_v<L>) return L::fed;
      else return false;
    }();
    constexpr bool state = detail::stored_leaf<L>() && L::role == leaf_role::state;
    constexpr bool forward_step = Step::wrt::size == 0;
    static_assert(!frozen, "ctg: frozen parameter: a frozen leaf has no gradient");
    static_assert(frozen || !input, "ctg: no gradient path: an input is fed, and the store keeps no gradient for it");
    static_assert(frozen || input || !state,
                  "ctg: no gradient path: an FP8 scaling state leaf (a scale or an amax history) is updated by the "
                  "step, never differentiated: it has no gradient");
    static_assert(frozen || input || state || !forward_step,
                  "ctg: no gradient path: a forward step computes no gradient (ctg::value_and_grad does)");
    static_assert(frozen || input || state || forward_step || tl::contains<L, typename Step::wrt>::value,
                  "ctg: no gradient path: this leaf is not in the step's wrt<...>");
    check_not_moved_from();
    return mem_.grad_bytes(tl::index_of<L, nodes>::value);
  }

  // The value of the step's first output (the loss, or forward(e)'s e) after
  // the last step: a view valid until the step runs again (a run writes the
  // other of two buffers, so a failed run leaves this value readable, and
  // may free and remake that one when its shape grows). Copy what you keep.
  auto value() const {
    using T = typename tl::at_t<0, typename Step::outputs>::dtype;
    static_assert(Backend::host_memory || !std::is_same_v<T, T>,
                  "ctg: this store's memory is a GPU's, which the host cannot read or write: copy with "
                  "store.upload(L{}, span), store.download(L{}, span), store.download_grad(L{}, span) and "
                  "store.download_value(span)");
    check_not_moved_from();
    return std::span<const T>(reinterpret_cast<const T*>(mem_.published()), mem_.published_count());
  }
  // The same, copied to the host: `host` holds value_count() elements (else
  // a ctg::error, and nothing is copied).
  std::size_t value_count() const { return mem_.published_count(); }
  template <class T>
  void download_value(std::span<T> host) {
    using V = typename tl::at_t<0, typename Step::outputs>::dtype;
    static_assert(std::is_same_v<std::remove_const_t<T>, V>,
                  "ctg: download_value takes a span of the value's dtype (the step's first output)");
    check_not_moved_from();
    if (host.size() != mem_.published_count())
      throw error("ctg: host span size differs from the step's value: " + std::to_string(mem_.published_count()) +
                  " elements expected, " + std::to_string(host.size()) + " given");
    Backend::download(ws_, host.data(), mem_.published(), host.size_bytes());
  }

  // Dropout's random stream: a seed (0 unless set), and the count of
  // successful steps, which keys each step's masks (state: it changes once
  // per step, after backward).
  void seed(std::uint64_t s) { key_.seed = s; }
  std::uint64_t seed() const { return key_.seed; }
  std::uint64_t steps_run() const { return key_.step; }
  void set_steps_run(std::uint64_t n) { key_.step = n; }

  // The backend's scratch (the CPU's holds the store's threads).
  typename Backend::workspace& workspace() { return ws_; }

  // When on, a step whose loss is not finite throws ctg::error and changes nothing.
  void check_finite(bool on) { check_finite_ = on; }

  // Group profiling (exec/group_profile.hpp): while on, each successful
  // run adds every group's time, bytes and operations to group_times();
  // turning it on again starts new sums. Off, a run pays one branch a group.
  void profile_groups(bool on) {
    check_not_moved_from();
    own_profile_ = on ? std::make_unique<profile_type>() : nullptr;
    profile_ = own_profile_.get();
  }
  std::span<const group_timing> group_times() const {
    check_not_moved_from();  // (its profile_ points into the store it was moved to)
    return profile_ ? profile_->sums() : std::span<const group_timing>{};
  }

  // Gradient accumulation (exec/micro_batch_set.hpp): the next steps come in
  // sets of k micro-batches; once a set is complete, grad<L>() holds the mean
  // of their gradients (each step's backward starts from 1/k, and the steps
  // add up), and the FP8 scaling states have updated once, from the max of
  // the set's amaxes. k = 1 (the default): every step is a set. Changing k
  // while a set is under way throws ctg::error and changes nothing, as does
  // a store in a replica group, whose group sets its count
  // (dist::data_parallel::accumulate; it scaled each run's gradient by
  // another count than the group's).
  void accumulate(std::uint32_t k) {
    check_not_moved_from();
    if (group_)
      throw error("ctg: accumulate: this store runs as a data-parallel replica (dist::data_parallel): set its "
                  "micro-batches with dp.accumulate(k); nothing was changed");
    acc_.set(k);
  }
  // The runs of one step a replica group makes of this store (its ranks'
  // micro-batches: dist::data_parallel).
  void accumulate_in_group(std::uint32_t runs) { acc_.set(runs); }
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
  // After a load between sets: the gradients of the values it replaced
  // are spent, the group's summed gradient too (an optimizer's next step
  // says there are none, as after an update).
  void drop_grads() {
    check_not_moved_from();
    if (group_) group_->drop_gradient();
    if (acc_.accumulated() != 0) consume_grads();
  }

  // Bytes of the stored leaves this store holds (parameters, frozen leaves,
  // FP8 state): without a stack's parameters while dist::fsdp holds them.
  std::size_t stored_bytes() const { return mem_.stored_bytes(); }

  // For a replica group that holds every stack's parameters in shards
  // (exec/replica_group.hpp): the store frees its copy of them, or makes
  // one again (zero-filled; the group fills it) to be read whole.
  bool holds_stacked_params() const { return mem_.holds_stacked_params(); }
  // Throws ctg::error unless it holds them: what a call that writes every
  // stored leaf checks before it writes any (nn::init_params).
  void check_stacked_params_held() const {
    if (!mem_.holds_stacked_params()) detail::throw_held_in_shards(first_stacked_param_name());
  }
  void release_stacked_params() { mem_.release_stacked_params(); }
  void hold_stacked_params() { mem_.hold_stacked_params(); }

  // Where the store's commits stand: the set's progress, the run count and
  // every FP8 amax folded since the set began. A replica group that plays
  // several replicas in turn (dist::data_parallel emulating) takes one before
  // a round of runs, and returns to it when a later run of the round fails:
  // real replicas would all have failed that round, so none of it commits.
  struct commit_point {
    std::uint32_t accumulated = 0;
    std::uint64_t steps_run = 0;
    std::vector<float> amaxes;
  };
  commit_point commit_point_now() {
    commit_point p{acc_.accumulated(), key_.step, {}};
    each_amax_record([&](auto& r) {
      const std::size_t at = p.amaxes.size();
      p.amaxes.resize(at + r.combined_count());
      Backend::download(ws_, p.amaxes.data() + at, reinterpret_cast<const std::byte*>(r.combined()),
                        r.combined_count() * sizeof(float));
    });
    return p;
  }
  void return_to(const commit_point& p) {
    acc_.rewind(p.accumulated);
    key_.step = p.steps_run;
    std::size_t at = 0;
    each_amax_record([&](auto& r) {
      Backend::upload(ws_, reinterpret_cast<std::byte*>(r.combined()), p.amaxes.data() + at,
                      r.combined_count() * sizeof(float));
      at += r.combined_count();
    });
  }

  // Run as one of several data-parallel replicas (exec/replica_group.hpp;
  // dist::data_parallel calls this): throws ctg::error, changing nothing,
  // while a set of micro-batches is under way. join(nullptr) leaves the
  // group: the store runs alone again, in sets of 1, and a set under way is
  // dropped (a group's runs are not added up in the store), with the FP8
  // amaxes its runs recorded.
  void join(replica_group* group) {
    if (!group) {
      group_ = nullptr;
      if (acc_.under_way())
        each_amax_record([&](auto& r) {
          const std::vector<float> zeros(r.combined_count(), 0.0f);
          Backend::upload(ws_, reinterpret_cast<std::byte*>(r.combined()), zeros.data(), zeros.size() * sizeof(float));
        });
      acc_ = micro_batch_set{};
      return;
    }
    if (acc_.under_way())
      throw error("ctg: join: " + acc_.progress() + " are accumulated; run the rest before joining a group");
    group_ = group;
  }
  bool in_replica_group() const { return group_ != nullptr; }
  // This store's number (detail::store_identity): an optimizer made for it
  // steps this store only; a store moved from has none (0).
  std::uint64_t identity() const { return identity_.value(); }
  // A store moved from (auto b = std::move(a)) holds no buffers: every use
  // of it (an optimizer's too) is an error, not a read of memory it gave away.
  void check_not_moved_from() const {
    if (identity_.value() == 0)
      throw error("ctg: this store was moved from (it holds no buffers): use the store it was moved to");
  }
  // Held by an optimizer's update (exec/run_lock.hpp): no step runs meanwhile.
  [[nodiscard]] detail::run_lock::held hold_alone() {
    check_not_moved_from();
    return run_lock_.enter();
  }

  // Run one step: check the feeds (which at compile time; their sizes and
  // index values at run time), resolve shapes, run every group, then commit.
  template <class... Feeds>
  CTG_NOINLINE result run(const Feeds&... feeds) {
    [[maybe_unused]] constexpr bool fed =
        detail::check_feeds<typename step_buffers<Backend, Key>::inputs, typename Feeds::leaf...>();
    check_not_moved_from();
    const auto alone = run_lock_.enter();
    if (group_) return run_as_replica(feeds...);
    check_stacked_params_held();
    for (std::size_t i = 0; i < N; ++i)
      if (rows_only_[i]) detail::throw_rows_only(table.node[i].name);
    if (profile_) profile_->start_run();
    prepare(nullptr, feeds...);
    detail::check_ids<Key>(host_ids(), mem_.bound().shape.data(), feeds...);
    reserve_scratch();
    run_launches();
    return commit(checked_loss());
  }

  // Bytes of the forward values kept for backward, and of all scratch
  // buffers, as placed for the last run (or plan): a stack's layers count
  // with what they keep, and scratch_bytes with the stack's block buffers
  // too; 0 for a store moved from.
  std::size_t kept_bytes() const { return identity() ? mem_.kept_bytes() + stack_kept_bytes() : 0; }
  std::size_t scratch_bytes() const { return identity() ? mem_.scratch_bytes() + stack_scratch_bytes() : 0; }

  // Place every buffer for these feeds without running: returns kept_bytes().
  template <class... Feeds>
  std::size_t plan(const Feeds&... feeds) {
    [[maybe_unused]] constexpr bool fed =
        detail::check_feeds<typename step_buffers<Backend, Key>::inputs, typename Feeds::leaf...>();
    check_not_moved_from();
    const auto alone = run_lock_.enter();
    prepare(nullptr, feeds...);
    reserve_scratch();
    return kept_bytes();
  }

 private:
  // A stack drives its block's store through the protocol below, and reads
  // its parent's buffers, key and stacked leaves.
  template <class, class, std::size_t>
  friend class stack_runner;
  // A stack's block (stack_runner::block_).
  struct block_of_stack {};
  explicit basic_store(block_of_stack) : mem_(detail::on_shared_leaves{}) {
    in_stack_block_ = true;
    make_amax_records(false);
  }
  // A store over several steps binds its other steps' leaves to its own.
  template <class, class, class...>
  friend class shared_store;

  // Where stack runner `runner` of this store keeps its layers' values: in
  // the area this store's caller gave its own kept values (a stack's block:
  // the outer stack's area for the layer running), after them and after the
  // runners before it, as size_as_block counted them (each part a multiple
  // of 64 bytes); null when none was given (the runner's own area). (Each
  // runner kept them in its own area only: a stack inside a stacked block,
  // neither recomputing, gave every outer layer's backward the last outer
  // layer's inner values.)
  template <class Runner>
  std::byte* stack_kept_area(const Runner& runner) {
    std::byte* area = mem_.kept_area();
    if (!area) return nullptr;
    std::size_t offset = mem_.kept_bytes();
    bool reached = false;
    std::apply(
        [&](const auto&... rt) {
          ((reached = reached || static_cast<const void*>(&rt) == static_cast<const void*>(&runner),
            offset += reached ? 0 : rt.kept_bytes()),
           ...);
        },
        stacks_);
    return area + offset;
  }

  // Sized as a stack's block for these feeds: its layers' kept values live
  // in the stack's area (stack_runner::plan), so its scratch holds the rest
  // only. Returns the kept bytes of one layer. (A block with stacks of its
  // own is placed whole: their plans read its buffers.)
  template <class... Feeds>
  std::size_t size_as_block(const Feeds&... feeds) {
    if constexpr (std::tuple_size_v<stack_runner_tuple> == 0) mem_.size_pools(ws_, feeds...);
    else prepare(nullptr, feeds...);
    reserve_scratch();
    return kept_bytes();
  }

  // ---------------------------------------------- the parts of a step ----
  // The forward and backward parts run apart: run_forward_part writes the
  // kept values into `kept`, and run_backward_part, given the same feeds and
  // `kept`, reads them back. Neither commits.
  template <class... Feeds>
  void run_forward_part(std::byte* kept, const Feeds&... feeds) {
    prepare(kept, feeds...);
    run_positions(0, prog.backward_begin);
  }
  template <class... Feeds>
  void run_backward_part(std::byte* kept, const Feeds&... feeds) {
    prepare(kept, feeds...);
    run_positions(prog.backward_begin, prog.len);
  }
  // Both parts, the forward one as a recompute (it records no state) of
  // what backward reads only (not a layer's output, which backward does not
  // read, nor what only that reads: a stack's layer, recomputed).
  template <class... Feeds>
  void run_recomputing(std::byte* kept, const Feeds&... feeds) {
    prepare(kept, feeds...);
    struct recompute_scope {  // (off again if the forward part throws)
      bool& on;
      ~recompute_scope() { on = false; }
    };
    {
      recomputing_ = true;
      recompute_scope scope{recomputing_};
      run_positions(0, prog.backward_begin, true);
    }
    run_positions(prog.backward_begin, prog.len);
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
    return mem_.bound().buf[tl::index_of<tl::at_t<K, typename Step::outputs>, nodes>::value];
  }

  // A run in a replica group: every replica learns whether every run
  // succeeded, with the same sizes, before any commits.
  template <class... Feeds>
  result run_as_replica(const Feeds&... feeds) {
    if (profile_) profile_->start_run();
    group_->before_run();
    std::string failure;
    loss_read loss{};
    auto attempt = [&](auto&& part) {
      try {
        part();
      } catch (const std::exception& e) {
        failure = e.what();
        if (failure.empty()) failure = "a step failed (an exception with no message)";
      }
    };
    attempt([&] {
      prepare(nullptr, feeds...);
      detail::check_ids<Key>(host_ids(), mem_.bound().shape.data(), feeds...);
      reserve_scratch();
    });
    // The fed dyn sizes, in feed order (how many is known at compile time).
    constexpr std::size_t n = (std::size_t(0) + ... + detail::dyn_count<typename Feeds::leaf::dims>());
    std::array<dim_t, n + 1> fed_dims{};
    std::size_t at = 0;
    auto dims_of = [&]<class F>(const F& f) {
      for (std::size_t d = 0; d < detail::dyn_count<typename F::leaf::dims>(); ++d) fed_dims[at++] = f.dyn_dims[d];
    };
    (dims_of(feeds), ...);
    (void)dims_of;
    const std::span<const dim_t> fed(fed_dims.data(), n);
    // A group whose gathers run inside the run agrees on the feeds first.
    if (group_->holds_stacked_params()) group_->agree(failure.empty() ? nullptr : &failure, fed);
    if (failure.empty())
      attempt([&] {
        run_positions(0, prog.len);
        loss = checked_loss();
      });
    group_->agree(failure.empty() ? nullptr : &failure, fed);
    return commit(loss);
  }

  // The FP8 amaxes' memory: this step's (not a stack's block's: its
  // quantizers record in the stack's, layer by layer), and each stack's for
  // all its layers.
  void make_amax_records(bool own = true) {
    if (own) {
      amaxes_.make(ws_, 1);
      pending_amax_ = amaxes_.pending(0);
    }
    std::apply([&](auto&... rt) { (rt.make_amax_record(ws_), ...); }, stacks_);
  }

  void set_initial_values() {
    for (std::size_t i = 0; i < N; ++i) {
      const detail::node_desc& d = table.node[i];
      if (!d.has_initial) continue;
      std::vector<std::byte> v(d.elem_bytes * static_cast<std::size_t>(d.dims.numel()));
      for (std::size_t at = 0; at < v.size(); at += d.elem_bytes)
        std::memcpy(v.data() + at, &d.initial_bits, d.elem_bytes);  // (little-endian: the low bytes)
      Backend::upload(ws_, mem_.param_bytes(i), v.data(), v.size());
    }
  }

  // Fed ids as the host reads them: in place, or (a backend whose memory the
  // host cannot read: Backend::host_readable) copied here first.
  auto host_ids() {
    // ([&]: only `this` is used, and only by a backend's branch; clang warns of [this] unused on the CPU.)
    return [&](std::span<const i32> ids) -> std::span<const i32> {
      if constexpr (requires { Backend::host_readable(ids.data()); }) {
        if (!Backend::host_readable(ids.data())) {
          ids_copy_.resize(ids.size());
          Backend::download(ws_, ids_copy_.data(), reinterpret_cast<const std::byte*>(ids.data()), ids.size_bytes());
          return ids_copy_;
        }
      }
      return ids;
    };
  }

  template <class L>
  static void check_host_size(std::size_t n) {
    if (n != L::dims::static_numel) detail::throw_host_size(L::name.c_str(), L::dims::static_numel, n);
  }
  // Stored leaf L's bytes, whole or held in rows only (leaf_bytes checks that).
  template <class L>
  std::byte* stored_bytes() {
    static_assert(tl::contains<L, nodes>::value, "ctg: this leaf is not part of the step's graph");
    static_assert(!tl::contains<L, nodes>::value || detail::stored_leaf<L>(),
                  "ctg: inputs are fed, not stored: use ctg::feed<X>");
    check_not_moved_from();
    std::byte* at = mem_.param_bytes(tl::index_of<L, nodes>::value);
    if (!at) detail::throw_held_in_shards(L::name.c_str());
    return at;
  }
  static const char* first_stacked_param_name() {
    for (std::size_t i = 0; i < N; ++i)
      if (step_buffers<Backend, Key>::stacked_param[i]) return table.node[i].name;
    return "";
  }

  template <class... Feeds>
  void prepare(std::byte* kept_area, const Feeds&... feeds) {
    mem_.prepare(ws_, kept_area, feeds...);
    mem_.bound().key = key_;
    fill_runtime_scalars();
  }

  // The loss seed (1/k of the micro-batch set), and 1/count of a mean, known
  // once the run's shapes are, each in its node's dtype.
  void fill_runtime_scalars() {
    const auto& b = mem_.bound();
    for (std::size_t i = 0; i < N; ++i) {
      const detail::node_desc& d = table.node[i];
      if (d.kind != node_kind::runtime_scalar) continue;
      double value = acc_.loss_seed() / (group_ ? group_->replicas() : 1);  // (a mean's 1/count reads two shapes)
      if (d.count_of[0] != detail::no_node)
        value = static_cast<double>(b.shape[d.count_of[1]].numel()) / static_cast<double>(b.shape[d.count_of[0]].numel());
      std::byte bytes[sizeof(double)];
      d.store_scalar(value, bytes);
      Backend::write_value(ws_, b.buf[i], bytes, d.elem_bytes);
    }
  }

  // ------------------------------------------------------------- run ----
  using runner = runner_t<typename Backend::workspace>;
  struct position {
    runner run = nullptr;  // null: a stack's forward or backward
    scratch_sizer_t<typename Backend::workspace> reserve = nullptr;  // null: no scratch
    group_call call{};
  };
  // What each program position runs: one entry per position, made once per step.
  static constexpr auto positions = []<std::size_t... Q>(std::index_sequence<Q...>) {
    return std::array<position, prog.len>{
        position{Backend::template runner_for<Key, prog.root[Q]>(), Backend::template scratch_for<Key, prog.root[Q]>(),
                 group_call_of<Key, prog.root[Q]>()}...};
  }(std::make_index_sequence<prog.len>{});

  // Before the first launch: every runner's scratch reserved for the bound
  // shapes, and each stack's layers planned (their buffers and kept area; a
  // block's plan reserves its runners' scratch). Scratch only grows, so
  // shapes reserved for once (by this store: its workspace may be shared)
  // are not looked at again.
  void reserve_scratch() {
    const auto& shapes = mem_.bound().shape;
    if (reserved_ && shapes == reserved_shapes_) return;
    const bindings_view view = mem_.bound().view();
    for (const position& p : positions)
      if (p.reserve) p.reserve(p.call, view, ws_);
    std::apply([&](auto&... rt) { (rt.plan(*this), ...); }, stacks_);
    reserved_shapes_ = shapes;
    reserved_ = true;
  }

  // The whole program of a run alone. A backend that replays launches (a
  // GPU's graphs) replays them while every buffer's address and shape stay
  // the same; not a step with random numbers, whose key (a kernel argument)
  // changes every step.
  void run_launches() {
    if constexpr (Backend::replays_launches && !has_node_kind(node_kind::random)) {
      if (profile_) {  // (each group timed alone: launched one by one)
        run_positions(0, prog.len);
        return;
      }
      auto& b = mem_.bound();
      const auto* bufs = reinterpret_cast<const std::byte*>(b.buf.data());
      const auto* shapes = reinterpret_cast<const std::byte*>(b.shape.data());
      replay_key_.assign(bufs, bufs + sizeof(b.buf));
      replay_key_.insert(replay_key_.end(), shapes, shapes + sizeof(b.shape));
      // A checkpoint region's recompute rebinds some buffers as the run goes:
      // the launches start from the placed ones (run again after a failed
      // capture too), and a replay, which runs no host code, ends with the
      // buffers a run ends with.
      const std::array<std::byte*, N> placed = b.buf;
      Backend::replay_launches(ws_, replay_key_, [&] {
        b.buf = placed;
        run_positions(0, prog.len);
      });
      b.buf = placed;
      for (std::size_t q = 0; q < prog.len; ++q)
        if (prog.enter_region[q] != detail::no_region) mem_.enter_recompute(prog.enter_region[q]);
    } else {
      run_positions(0, prog.len);
    }
  }

  // Positions [from, to), or of those what backward reads only.
  void run_positions(std::size_t from, std::size_t to, bool backward_reads_only = false) {
    const bindings_view view = mem_.bound().view();
    for (std::size_t q = from; q < to; ++q) {
      if (prog.enter_region[q] != detail::no_region) mem_.enter_recompute(prog.enter_region[q]);
      const position& p = positions[q];
      if (backward_reads_only && !prog.backward_reads[p.call.root]) continue;
      const node_kind k = table.node[p.call.root].kind;
      if (k == node_kind::stack) {
        run_stack(p.call.root, true);
      } else if (k == node_kind::stack_grad) {
        run_stack(p.call.child[0], false);
      } else {
        const bool records = k == node_kind::quantize && table.node[p.call.root].delayed;
        float* amax = records && !recomputing_ && !prog.recompute[q] ? pending_amax_ + p.call.fp8_slot : nullptr;
        const replica_group::quantized* given = nullptr;
        if (k == node_kind::quantize && group_) given = group_->provided(p.call.root);
        else if (k == node_kind::quantize && layer_group_) given = layer_group_->layer_provided(layer_stack_, p.call.root);
        if (given) use_provided(p.call.root, *given, view, amax);
        else if (profile_) run_profiled(p, view, amax);
        else p.run(p.call, view, ws_, amax);
      }
    }
  }
  void run_profiled(const position& p, const bindings_view& v, float* amax) {
    const auto from = profile_->now(ws_);
    p.run(p.call, v, ws_, amax);
    const auto to = profile_->now(ws_);
    const group_work w = group_work_of(table.view(), p.call, v);
    profile_->ran(profile_block_, p.call.root, w.bytes, w.flops, from, to);
  }
  // Quantize node r's value as its replica group gave it: the payload, its
  // side data (amax, scale, scale_inv: exec/buffers.hpp) and the amax it records.
  void use_provided(std::size_t r, const replica_group::quantized& given, const bindings_view& b, float* amax) {
    Backend::upload(ws_, b.buf[r], given.payload, static_cast<std::size_t>(b.shape[r].numel()) * table.node[r].elem_bytes);
    const fp8_side_data side{given.amax, given.scale, {}, fp8_scaling::scale_inv_of(given.amax, given.scale)};
    Backend::upload(ws_, reinterpret_cast<std::byte*>(fp8_side(b, r)), &side, sizeof side);
    if (amax) Backend::upload(ws_, reinterpret_cast<std::byte*>(amax), &given.amax, sizeof(float));
  }
  // The forward or the backward of the stack node r.
  void run_stack(std::size_t r, bool forward) {
    std::apply(
        [&](auto&... rt) {
          auto one = [&]<class S>(S& s) {
            if (s.node != r) return;
            if (forward) s.run_forward(*this);
            else if constexpr (S::has_backward) s.run_backward(*this);
          };
          (one(rt), ...);
          (void)one;
        },
        stacks_);
  }

  // ---------------------------------------------------------- commit ----
  // The run's first output: its element count and first value, checked
  // finite (every element) when asked; throws, having changed nothing.
  struct loss_read {
    std::size_t count = 0;
    result first = 0;
  };
  loss_read checked_loss() {
    using T = typename tl::at_t<0, typename Step::outputs>::dtype;
    constexpr std::size_t il = tl::index_of<tl::at_t<0, typename Step::outputs>, nodes>::value;
    const std::size_t count = static_cast<std::size_t>(mem_.bound().shape[il].numel());
    const std::size_t read = check_finite_ ? count : (count ? 1 : 0);
    const std::size_t words = (read * sizeof(T) + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
    if (loss_host_.size() < words) loss_host_.resize(words);  // (grown once: a step allocates nothing)
    T* host = reinterpret_cast<T*>(loss_host_.data());
    Backend::download(ws_, host, mem_.bound().buf[il], read * sizeof(T));
    for (std::size_t i = 0; check_finite_ && i < read; ++i)
      if (!std::isfinite(static_cast<double>(load_as(host[i]))))
        throw error("ctg: the loss is not finite (" + std::to_string(static_cast<double>(load_as(host[i]))) +
                    "); nothing was written");
    return {count, count ? static_cast<result>(load_as(host[0])) : result(0)};
  }
  // Nothing visible changed before this point.
  result commit(loss_read loss) {
    if (profile_) profile_->settle();
    mem_.publish(ws_, loss.count);
    if (!on_shared_leaves_) {  // (a step on another store's leaves writes none of its state)
      ++key_.step;
      copy_grads(group_ || acc_.next_starts_set());  // (a group sums its runs' gradients itself)
      fold_state();
      acc_.count_step();
      if (acc_.complete()) update_state();
      if (group_) group_->committed();
    }
    return loss.first;
  }

  // Each wrt leaf's gradient, from its output into the leaf's gradient
  // buffer: written by the first step of a set of micro-batches, added by
  // the others (in the leaf's dtype).
  struct grad_copy {
    std::size_t leaf = 0, output = 0, elements = 0, bytes = 0;
    void (*add)(typename Backend::workspace&, std::byte*, const std::byte*, std::size_t) = nullptr;
  };
  static constexpr auto grad_copies = []<class... Ls>(tl::list<Ls...>) {
    constexpr std::size_t n = (std::size_t(0) + ... + detail::stored_leaf<Ls>());  // (a carry's is read from the output)
    std::array<grad_copy, n> c{};
    std::size_t k = 0;
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (detail::stored_leaf<L>())
        c[k++] = {tl::index_of<L, nodes>::value,
                  tl::index_of<tl::at_t<Step::template grad_output<L>, typename Step::outputs>, nodes>::value,
                  L::dims::static_numel, L::dims::static_numel * sizeof(typename L::dtype),
                  &Backend::template accumulate<typename L::dtype>};
    };
    (one(std::type_identity<Ls>{}), ...);
    (void)one;
    return c;
  }(typename Step::wrt{});
  void copy_grads(bool first) {
    for (const grad_copy& c : grad_copies) {
      if (first) Backend::copy(ws_, mem_.grad_bytes(c.leaf), mem_.bound().buf[c.output], c.bytes);
      else c.add(ws_, mem_.grad_bytes(c.leaf), mem_.bound().buf[c.output], c.elements);
    }
  }

  // After a successful run: its FP8 amaxes into each scaling state's (the max over its uses).
  void fold_state() {
    amaxes_.fold(ws_);
    std::apply([&](auto&... rt) { (rt.amaxes().fold(ws_), ...); }, stacks_);
  }
  // When the set of micro-batches is complete: each FP8 scaling state updated once.
  void update_state() {
    if (group_) max_amaxes_over_replicas();
    for (std::size_t s = 0; s < fp8_state<Key>::states; ++s) {
      const scaling_state& st = fp8_state<Key>::table.state[s];
      amaxes_.update(ws_, s, reinterpret_cast<float*>(mem_.param_bytes(st.history)),
                     reinterpret_cast<float*>(mem_.param_bytes(st.scale)));
    }
    update_stack_states(std::make_index_sequence<std::tuple_size_v<stack_runner_tuple>>{});
  }
  // Two stacks of one block and layer count share their FP8 states (the
  // same stacked state leaves): the first updates them once, from the max
  // of every sharing stack's amaxes; the others not at all. (Each updated
  // them: two entries a step in a history, a scale from the last stack's
  // amax alone.)
  template <std::size_t I, std::size_t J>
  static consteval bool same_states() {
    using A = std::tuple_element_t<I, stack_runner_tuple>;
    using B = std::tuple_element_t<J, stack_runner_tuple>;
    if constexpr (I == J || A::states == 0 || A::states != B::states) {
      return false;
    } else {
      for (std::size_t s = 0; s < A::states; ++s)
        if (A::stacked_state[s].history != B::stacked_state[s].history) return false;
      return true;
    }
  }
  template <std::size_t... J>
  void update_stack_states([[maybe_unused]] std::index_sequence<J...> all) {
    (update_stack_state<J>(all), ...);
  }
  template <std::size_t J, std::size_t... I>
  void update_stack_state(std::index_sequence<I...>) {
    if constexpr (!((I < J && same_states<I, J>()) || ...)) {  // (else an earlier stack updated them)
      auto& first = std::get<J>(stacks_);
      auto take = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
        if constexpr (K > J && same_states<J, K>()) take_amaxes(first.amaxes(), std::get<K>(stacks_).amaxes());
      };
      (take(std::integral_constant<std::size_t, I>{}), ...);
      first.update_state(*this);
    }
  }
  // into's amaxes made the max of its and from's; from's start again from 0
  // (through the host: only two stacks of one block with FP8 states take it).
  template <class Record>
  void take_amaxes(Record& into, Record& from) {
    const std::size_t n = into.combined_count();
    shared_amax_.resize(2 * n);
    float* a = shared_amax_.data();
    float* b = a + n;
    Backend::download(ws_, a, reinterpret_cast<const std::byte*>(into.combined()), n * sizeof(float));
    Backend::download(ws_, b, reinterpret_cast<const std::byte*>(from.combined()), n * sizeof(float));
    for (std::size_t i = 0; i < n; ++i) a[i] = fp8_scaling::amax_combine(a[i], b[i]);
    std::fill(b, b + n, 0.0f);
    Backend::upload(ws_, reinterpret_cast<std::byte*>(into.combined()), a, n * sizeof(float));
    Backend::upload(ws_, reinterpret_cast<std::byte*>(from.combined()), b, n * sizeof(float));
  }

  // Every amax of this step (its own states', then each stack's), made the
  // max over the replicas in one call (through the host).
  void max_amaxes_over_replicas() {
    std::vector<float>& all = replica_amax_;  // (the same size every step: allocated once)
    std::size_t total = 0;
    each_amax_record([&](auto& r) { total += r.combined_count(); });
    all.resize(total);
    std::size_t at = 0;
    each_amax_record([&](auto& r) {
      Backend::download(ws_, all.data() + at, reinterpret_cast<const std::byte*>(r.combined()),
                        r.combined_count() * sizeof(float));
      at += r.combined_count();
    });
    group_->max_over_replicas(all);
    at = 0;
    each_amax_record([&](auto& r) {
      Backend::upload(ws_, reinterpret_cast<std::byte*>(r.combined()), all.data() + at, r.combined_count() * sizeof(float));
      at += r.combined_count();
    });
  }

  // f(record) for this step's amax record, then each stack's.
  template <class F>
  void each_amax_record(F&& f) {
    f(amaxes_);
    std::apply([&](auto&... rt) { (f(rt.amaxes()), ...); }, stacks_);
  }

  std::size_t stack_kept_bytes() const {
    return std::apply([](const auto&... rt) { return (std::size_t(0) + ... + rt.kept_bytes()); }, stacks_);
  }
  std::size_t stack_scratch_bytes() const {
    return std::apply([](const auto&... rt) { return (std::size_t(0) + ... + rt.scratch_bytes()); }, stacks_);
  }

  template <std::size_t... I>
  static auto stack_runners(std::index_sequence<I...>)
      -> tl::apply<std::tuple, tl::concat_t<std::conditional_t<table.node[I].kind == node_kind::stack,
                                                             tl::list<stack_runner<Backend, Key, I>>, tl::list<>>...>>::type;
  using stack_runner_tuple = decltype(stack_runners(std::make_index_sequence<N>{}));
  template <class... R>
  static consteval bool blocks_have_node_kind(std::tuple<R...>*, node_kind k) {
    (void)k;  // (unread when the step has no stack)
    return (R::block_store::has_node_kind(k) || ...);
  }

  detail::group_link group_;  // data-parallel replicas (null: this store alone); first (detail::group_link)
  step_buffers<Backend, Key> mem_;
  amax_record<Backend, Key> amaxes_;
  float* pending_amax_ = nullptr;  // where this run's quantizers record (a stack's block: its layer's slots)
  stack_runner_tuple stacks_;
  typename Backend::workspace ws_;
  random_key key_{};
  micro_batch_set acc_;
  bool recomputing_ = false;  // running a forward part again: record no state
  bool on_shared_leaves_ = false;  // runs on another store's leaves (exec/shared_store.hpp)
  bool in_stack_block_ = false;    // a stack's block: its stacks keep their values in its kept area
  bool check_finite_ = false;
  std::array<bool, N> rows_only_{};  // (hold_rows_only)
  detail::store_identity identity_;
  detail::run_lock run_lock_;  // one run or update at a time (hold_alone)
  // A stack's block store: the parent's group when it gathers the layers
  // (their quantize values may come from it), and the parent's stack node.
  const replica_group* layer_group_ = nullptr;
  std::size_t layer_stack_ = 0;
  std::vector<float> replica_amax_;  // every amax of a step, as its group maxes them
  std::vector<float> shared_amax_;   // two stacks' amaxes of shared FP8 states (take_amaxes)
  std::vector<std::max_align_t> loss_host_;  // the loss's values read to the host (checked_loss)
  std::vector<i32> ids_copy_;        // fed ids copied to the host for their check (host_ids)
  std::vector<std::byte> replay_key_;  // the bindings' bytes (run_launches)
  std::array<rt_shape, N> reserved_shapes_{};  // the shapes the scratch was last reserved for (reserve_scratch)
  bool reserved_ = false;
  // Group profiling: this store's own sums, and the ones its runs add to
  // (a stack's block: its parent's, under its place profile_block_).
  using profile_type = group_profile<typename Backend::group_clock>;
  std::unique_ptr<profile_type> own_profile_;
  profile_type* profile_ = nullptr;
  block_path profile_block_{};
};

}  // namespace ctg

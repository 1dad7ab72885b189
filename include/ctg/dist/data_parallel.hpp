#pragma once
// dist::data_parallel: one store as a rank of a data-parallel run. Each rank
// feeds its own batch to the same step; together the ranks compute the loss
// and gradients of the global batch (the ranks' batches, in rank order, all
// of one shape), and dist::sharded_adamw updates each rank's dim-0 shard.
//
//   ctg::dist::mpi_comm comm{argc, argv};
//   auto store = ctg::make_store(dev, step);
//   ctg::nn::init_params(store, seed);                  // the same on every rank (checked)
//   ctg::dist::data_parallel dp(store, comm);
//   ctg::dist::sharded_adamw opt(dp, {.lr = 1e-3f});
//   for (...) {
//     step(store, ctg::feed<Ids>(my_ids, b, t), ...);  // this rank's batch
//     opt.step();                                       // dp.loss(): the global batch's loss
//   }
//
// What a step does (exec/replica_group.hpp for the store's side):
//   * backward starts from 1/W: each rank's gradient is its share of the
//     global mean's, where each rank's loss is a mean over the same count
//     (as PyTorch DDP: a count that varies by rank, such as cross_entropy's
//     targets not ignored, is weighted by rank, not by element);
//   * every rank learns whether every rank's run succeeded, with the same
//     fed sizes, before any commits: a mistake on one rank is a ctg::error
//     on all of them, never a hang;
//   * FP8 amaxes are the max over the ranks before any scaling state
//     updates (one gather for all of them), so scales stay equal;
//   * gradients are reduce-scattered in f32: each rank cuts its gradient
//     into W dim-0 shards (shard_layout.hpp), one all-to-all brings rank r
//     every rank's piece of shard r, and rank r sums them in rank order.
//
// Bitwise reproducible across world sizes: no library reduction is used, so
// the sums run in one fixed order. data_parallel(store, emulate{W}) plays W
// ranks in one process (W runs per step, run v fed rank v's batch): its
// losses, gradients and parameters are bit for bit those of W real ranks.
// Dropout masks are keyed by the global run (step * W + rank), the same in
// both. A store alone counts global runs too (store.steps_run(): what a
// checkpoint saves): joining, rank v's next run is that count + v; when the
// data_parallel ends, the store's count is the global runs of the steps
// done, so a data_parallel made again goes on with the next runs' masks.
//
// Gradient accumulation: dp.accumulate(k) makes a step k micro-batches per
// rank (backward from 1/(k * W)); each rank adds its micro-batches'
// gradients in f32, in order, before the reduce-scatter, and the FP8 states
// update once per step. Emulating, run m * W + v is rank v's micro-batch m,
// and the global run (step * k + m) * W + v keys its dropout masks.
//
// Parameters: by default, ZeRO-style: gradients, optimizer state and f32
// masters live in shards, and each rank holds every parameter whole between
// steps (gathered after each update). With dist::fsdp, as FSDP2: the
// parameters of every nn::stack (a transformer's layers: nearly all of its
// weights; frozen ones too) live in shards only, each layer's rows on each rank (shard
// layout); a layer's slices are all-gathered just before it runs, its
// forward and again its backward (with its recompute), and dropped after,
// so one layer of a stack is whole at a time. fsdp{.reshard_after_forward =
// false} keeps the forward's gathers for the backward instead: half the
// gathers, every layer whole during the run. The leaves outside any stack
// (embedding, head, final norm: the root unit, which FSDP2 does not reshard
// after forward either) are gathered once per step, after the update, as by
// default. The store keeps no copy of a stack's parameters (its
// stored_bytes() drops by them); their values are the optimizer's to change.
//
// FP8 all-gather: a weight whose one use is shard(quantize<Fmt, S>(w))
// with delayed scaling (outside a stack) travels as fp8 bytes. After each
// update every rank casts its own rows with the state's scale and takes
// their amax; one all-gather gives every rank the whole payload and every
// rank's amax, and at the next step the store takes the quantize node's
// value from here instead of computing it (exec/replica_group.hpp). The
// cast is per element and the amax a max, so the payload, the amax and the
// scale are those of quantizing the whole weight, bit for bit. The weight
// itself is then whole only in this rank's rows (sharded_adamw's
// gather_whole_parameters() makes it whole, as dist::save does).
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <ctg/core/fp8_scaling.hpp>
#include <ctg/core/hash.hpp>
#include <ctg/dist/communicator.hpp>
#include <ctg/dist/shard_layout.hpp>
#include <ctg/dist/stack_shards.hpp>
#include <ctg/exec/invalid_store.hpp>
#include <ctg/exec/replica_group.hpp>
#include <ctg/graph/step.hpp>

namespace ctg::dist {

// How many ranks one process plays (data_parallel(store, emulate{W})).
struct emulate {
  int world = 1;
};

namespace detail {
// What each rank says of its run, gathered by every rank.
struct run_report {
  std::int32_t failed = 0;
  std::int32_t micro_batches = 0;  // (accumulate(k): the ranks' collectives pair up only when every k is the same)
  std::int32_t dim_count = 0;
  std::int64_t dim[8]{};
  std::uint64_t dims_hash = 0;
  char message[216]{};
};
// The optimizer a data_parallel updates with (dist::sharded_adamw): the
// data_parallel calls it to cast and gather fp8 payloads again, and tells
// it when it ends or another optimizer takes its place, so an optimizer
// never reaches a data_parallel that is gone.
class data_parallel_optimizer {
 public:
  virtual void cast_payloads_again() = 0;
  virtual void released() = 0;

 protected:
  ~data_parallel_optimizer() = default;
};
// What each rank says when it joins.
struct join_report {
  std::uint64_t model_a = 0, model_b = 0;
  std::uint64_t values_hash = 0;
  std::uint64_t seed = 0;
  std::int32_t world = 0;
  std::uint64_t steps_run = 0;
  std::int32_t fsdp = 0;  // 0: none; 1: dist::fsdp{}; 2: fsdp{.reshard_after_forward = false}
  std::int32_t busy = 0;  // 1: the store runs in another data_parallel; 2: a set of micro-batches is under way
};
inline std::int32_t fsdp_code(const std::optional<fsdp>& f) { return !f ? 0 : f->reshard_after_forward ? 1 : 2; }
inline const char* fsdp_text(std::int32_t code) {
  return code == 0 ? "without dist::fsdp" : code == 1 ? "with dist::fsdp{}" : "with dist::fsdp{.reshard_after_forward = false}";
}
// f.template operator()<L>() for every stored leaf of the step (parameters,
// frozen leaves, FP8 state).
template <class Step, class F>
void for_each_stored_leaf(F&& f) {
  [&]<class... Ls>(tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (ctg::detail::stored_leaf<L>()) f.template operator()<L>();
    };
    (one(std::type_identity<Ls>{}), ...);
    (void)one;
  }(leaves_t<typename Step::nodes>{});
}
// The fed dyn sizes, in feed order ("dyn sizes 2, 5, 5").
inline std::string dims_text(const run_report& r) {
  std::string s;
  for (std::int32_t i = 0; i < r.dim_count && i < 8; ++i) s += (i ? ", " : "dyn sizes ") + std::to_string(r.dim[i]);
  if (r.dim_count > 8) s += ", ...";
  return s.empty() ? "no dyn dims" : s;
}
}  // namespace detail

template <step_store Store>
class data_parallel final : public replica_group {
 public:
  using store_type = Store;
  using step_type = typename Store::step_type;
  using trainable = typename step_type::wrt;
  using layout_type = block_layout<step_type>;
  // What gradients are reduce-scattered in: each rank's piece travels and
  // is summed in this type, whatever the parameters' dtypes (f32 only).
  using reduce_dtype = f32;

  // This store as rank comm.rank() of comm.size() ranks. Throws ctg::error,
  // on every rank, if the ranks run different steps or hold different
  // parameters (or FP8 state, or step counts).
  data_parallel(Store& s, communicator& c) : data_parallel(s, c, c.size(), 1, std::nullopt) {}
  // This store playing all of `e.world` ranks.
  data_parallel(Store& s, emulate e) : data_parallel(s, own_, e.world, e.world, std::nullopt) {}
  // The same, a stack's parameters held in shards (FSDP2: see above).
  data_parallel(Store& s, communicator& c, fsdp f) : data_parallel(s, c, c.size(), 1, f) { check_fsdp_model(); }
  data_parallel(Store& s, emulate e, fsdp f) : data_parallel(s, own_, e.world, e.world, f) { check_fsdp_model(); }

  data_parallel(const data_parallel&) = delete;
  data_parallel& operator=(const data_parallel&) = delete;
  // The store runs alone again. It keeps the stacks' parameters whole only
  // where this process held every shard (emulating, or one rank); on real
  // ranks, dist::save before this ends: the store then holds its rows only,
  // and running it alone is a ctg::error.
  ~data_parallel() {
    if (optimizer_) optimizer_->released();
    if (store_ended_) return;  // (destroyed first: nothing to give back)
    if (every_shard_here()) make_whole();
    store_.join(nullptr);
    store_.set_steps_run(global_runs());  // (a step under way counts for nothing, as its gradient)
  }

  Store& store() { return store_; }
  communicator& comm() { return comm_; }
  int world() const { return world_; }
  // The shards this process holds: [first_shard(), first_shard() + shards_held()).
  int first_shard() const { return emulating() ? 0 : comm_.rank(); }
  int shards_held() const { return local_runs_; }
  const layout_type& layout() const { return layout_; }

  // After a complete step (every rank's run): the global batch's loss, the
  // mean of the ranks' losses (summed in rank order).
  float loss() const { return loss_; }
  // Is there a reduced gradient no optimizer has applied yet?
  bool has_gradient() const { return complete_; }
  // Shard `first_shard() + h` of the global gradient, in block layout.
  std::span<const reduce_dtype> grad_shard(int h) const {
    return {grads_.data() + static_cast<std::size_t>(h) * layout_.elements, layout_.elements};
  }
  // The next steps are k micro-batches per rank (1 by default). Throws
  // ctg::error, changing nothing, for k < 1 or while a step is under way.
  void accumulate(int k) {
    if (k < 1) throw error("ctg: data parallel: accumulate(" + std::to_string(k) + "): a step has at least 1 micro-batch");
    if (runs_ != 0)
      throw error("ctg: data parallel: accumulate: " + std::to_string(runs_) + " runs of this step are done; run the "
                  "rest before changing the micro-batch count");
    store_.accumulate_in_group(static_cast<std::uint32_t>(k * local_runs_));
    micro_ = k;
  }
  int micro_batches() const { return micro_; }
  // Runs of the step under way this process has made (0 between steps).
  int runs_done() const { return runs_; }

  // After a checkpoint is loaded (dist::load): `runs` is the global run
  // count it was saved at (its store's), and the next runs are keyed from
  // it as the run that saved it would have keyed them: rank v's run j of
  // the next step runs + j * W + v, whatever the micro-batches a step.
  // (AdamW's step count times k and W missed the runs of a step no update
  // applied, and steps of another k.)
  void resume_at(std::uint64_t runs) {
    store_.set_steps_run(runs + static_cast<std::uint64_t>(first_shard()));
  }

  // What an optimizer calls once it has applied the gradient.
  void consume() {
    complete_ = false;
    store_.consume_grads();
  }

  // Trainable leaf K's quantize node when it is gathered as fp8 bytes, else detail::none.
  static constexpr std::array<std::size_t, trainable::size + 1> fp8_quantizer =
      []<std::size_t... K>(std::index_sequence<K...>) {
        return std::array<std::size_t, trainable::size + 1>{
            detail::sole_sharded_quantizer<tl::at_t<K, trainable>>(typename step_type::nodes{})..., detail::none};
      }(std::make_index_sequence<trainable::size>{});
  // Leaf K's whole fp8 payload (what sharded_adamw gathers into), and that
  // it holds the weight's current value, cast with `scale`, of amax `amax`.
  std::byte* fp8_payload(std::size_t k) { return payloads_[k].bytes.data(); }
  void fp8_gathered(std::size_t k, float amax, float scale) {
    payloads_[k].value = {payloads_[k].bytes.data(), amax, scale};
    payloads_[k].valid = true;
  }
  // The optimizer that updates this data_parallel (sharded_adamw: one at a
  // time, the last made), which casts and gathers the payloads again for a
  // run whose scales changed since the last gather (refresh_fp8_payloads).
  void attach(detail::data_parallel_optimizer* opt) {
    if (optimizer_ && optimizer_ != opt) optimizer_->released();
    optimizer_ = opt;
  }
  void detach(detail::data_parallel_optimizer* opt) {
    if (optimizer_ == opt) optimizer_ = nullptr;
  }
  // The weights are whole again (loaded): the store quantizes them itself.
  void forget_fp8_payloads() {
    for (auto& p : payloads_) p.valid = false;
  }

  // ---------------------------------------------------------- fsdp ----
  using shards_type = stack_shards<Store>;
  template <std::size_t K>
  static constexpr bool stacked = shards_type::template stacked<K>;
  // Does this run hold the stacks' parameters in shards (dist::fsdp)?
  bool holds_stacked_params() const override { return shards_.has_value() && shards_->holds(); }
  // The rows of stacked leaf K in held shard h (first_shard() + h), packed
  // as the shard's runs (shard_layout.hpp), in the leaf's dtype.
  template <std::size_t K, class L>
  typename L::dtype* resident_rows(int h) {
    return shards_->template resident_rows<K, L>(h);
  }
  // Bytes of the stacks' parameters this process holds (its shards), and of
  // the slices gathered for the layers that run (one layer of each stack,
  // or every layer when the forward's gathers are kept).
  std::size_t resident_bytes() const { return shards_ ? shards_->resident_bytes() : 0; }
  std::size_t gathered_bytes() const { return shards_ ? shards_->gathered_bytes() : 0; }
  // Every rank: the stacks' parameters whole in the store again, gathered
  // from every rank's shards (a checkpoint reads them), until the next run
  // or reshard().
  void make_whole() {
    if (shards_) shards_->make_whole(every_shard_here() ? nullptr : &comm_);
  }
  // This process's rows of the stacks' parameters taken from the store's
  // whole copy (a load, or a write after make_whole()), and the copy freed.
  void reshard() {
    if (shards_) shards_->reshard();
  }

  // ------------------------------------------------- replica_group ----
  std::uint32_t replicas() const override { return emulating() ? 1u : static_cast<std::uint32_t>(world_); }

  void agree(const std::string* failure, std::span<const dim_t> fed_dims) override {
    detail::run_report mine;
    mine.failed = failure != nullptr;
    mine.micro_batches = micro_;
    mine.dim_count = static_cast<std::int32_t>(fed_dims.size());
    for (std::size_t i = 0; i < fed_dims.size() && i < 8; ++i) mine.dim[i] = fed_dims[i];
    mine.dims_hash = fnv1a64(reinterpret_cast<const unsigned char*>(fed_dims.data()), fed_dims.size_bytes());
    if (failure) std::strncpy(mine.message, failure->c_str(), sizeof(mine.message) - 1);

    // Every rank's report; emulating, the ranks are this process's runs:
    // this one against its round's first (rank 0's run of this micro-batch:
    // the ranks feed one shape a micro-batch, as real ranks check; the
    // micro-batches may differ).
    // A run that fails there undoes the earlier runs of its round (the
    // ranks' runs of one micro-batch), which W real ranks would not have
    // committed either: the round starts again from rank 0.
    std::span<const detail::run_report> all;
    detail::run_report this_and_first[2];
    auto different_sizes = [](const detail::run_report& first, std::size_t rank, const detail::run_report& other) {
      return error("ctg: data parallel: the ranks fed batches of different sizes (rank 0: " + detail::dims_text(first) +
                   "; rank " + std::to_string(rank) + ": " + detail::dims_text(other) +
                   "); every rank feeds the same shape, so no rank committed this run");
    };
    if (emulating()) {
      if (runs_ % local_runs_ == 0) first_run_ = mine;
      this_and_first[0] = first_run_;
      this_and_first[1] = mine;
      all = this_and_first;
      const bool same_sizes = mine.dims_hash == first_run_.dims_hash && mine.dim_count == first_run_.dim_count;
      if (const int rank = runs_ % local_runs_; rank != 0 && (mine.failed || !same_sizes)) {
        undo_round();
        if (!failure) throw different_sizes(first_run_, static_cast<std::size_t>(rank), mine);
        const std::string undone = rank == 1 ? "rank 0's run" : "the runs of ranks 0 to " + std::to_string(rank - 1);
        throw error(*failure + " (emulated rank " + std::to_string(rank) + ": " + undone +
                    " of this micro-batch undone; run the micro-batch again from rank 0)");
      }
    } else {
      comm_.all_gather(std::span<const detail::run_report>(&mine, 1), std::span(reports_));
      all = reports_;
    }
    for (std::size_t r = 0; r < all.size(); ++r) {
      if (!all[r].failed) continue;
      if (failure) throw error(*failure);
      throw error("ctg: data parallel: rank " + std::to_string(r) + " failed this step, so no rank committed it (" +
                  all[r].message + ")");
    }
    for (std::size_t r = 1; r < all.size(); ++r)
      if (all[r].micro_batches != all[0].micro_batches)
        throw error("ctg: data parallel: rank " + std::to_string(r) + " makes steps of " +
                    std::to_string(all[r].micro_batches) + " micro-batches, rank 0 of " +
                    std::to_string(all[0].micro_batches) + "; every rank calls dp.accumulate(k) with the same k, "
                    "so no rank committed this run");
    for (std::size_t r = 1; r < all.size(); ++r) {
      if (all[r].dims_hash == all[0].dims_hash && all[r].dim_count == all[0].dim_count) continue;
      throw different_sizes(all[0], emulating() ? static_cast<std::size_t>(runs_ % local_runs_) : r, all[r]);
    }
  }

  void max_over_replicas(std::span<float> amax) override {
    if (emulating() || amax.empty()) return;  // (emulating: the store folded its runs' amaxes itself)
    gathered_amax_.resize(amax.size() * static_cast<std::size_t>(world_));  // (sized once: the same every step)
    comm_.all_gather(std::span<const float>(amax), std::span(gathered_amax_));
    for (std::size_t i = 0; i < amax.size(); ++i) {
      float a = 0.0f;  // (folded from 0 in rank order, as a store folds its runs)
      for (int r = 0; r < world_; ++r)
        a = fp8_scaling::amax_combine(a, gathered_amax_[static_cast<std::size_t>(r) * amax.size() + i]);
      amax[i] = a;
    }
  }

  void store_ended() override { store_ended_ = true; }
  void before_run() override {
    reshard();
    if (emulating() && local_runs_ > 1 && runs_ % local_runs_ == 0) take_round_start();
    refresh_fp8_payloads();
  }

  void gather_layer(std::size_t stack, std::size_t layer, bool backward) override {
    shards_->gather_layer(stack, layer, backward, every_shard_here() ? nullptr : &comm_);
  }
  const std::byte* layer_slice(std::size_t leaf) const override { return shards_->layer_slice(leaf); }
  const quantized* layer_provided(std::size_t stack, std::size_t node) const override {
    return shards_->layer_value(stack, node);
  }

  const quantized* provided(std::size_t node) const override {
    for (std::size_t k = 0; k < trainable::size; ++k)
      if (fp8_quantizer[k] == node && payloads_[k].serves) return &payloads_[k].value;
    return nullptr;
  }

  void drop_gradient() override { complete_ = false; }

  void committed() override {
    const int v = runs_ % local_runs_, m = runs_ / local_runs_;  // (rank v's micro-batch m)
    if (runs_ == 0) complete_ = false;  // (a new step replaces an unapplied gradient, as in a store)
    cut_into_shards(contributions_.data() + static_cast<std::size_t>(v) * world_ * layout_.elements, m > 0);
    const auto value = store_.value();
    const double loss = value.empty() ? 0.0 : static_cast<double>(load_as(value[0]));
    losses_[static_cast<std::size_t>(v)] = m == 0 ? loss : losses_[static_cast<std::size_t>(v)] + loss;
    if (!emulating()) store_.set_steps_run(store_.steps_run() - 1 + static_cast<std::uint64_t>(world_));
    if (++runs_ < micro_ * local_runs_) return;
    runs_ = 0;
    reduce();
    complete_ = true;
  }

 private:
  data_parallel(Store& s, communicator& c, int world, int local_runs, std::optional<fsdp> f)
      : store_(s), comm_(c), world_(world), local_runs_(local_runs), layout_(layout_type::of(world)) {
    if (world < 1) throw error("ctg: data parallel: emulate{" + std::to_string(world) + "}: a world has at least 1 rank");
    const std::size_t b = layout_.elements, w = static_cast<std::size_t>(world);
    contributions_.assign(static_cast<std::size_t>(local_runs) * w * b, 0.0f);
    received_.assign(emulating() ? 0 : w * b, 0.0f);
    reports_.resize(emulating() ? 0 : w);
    rank_losses_.assign(emulating() ? 0 : w, 0.0);
    grads_.assign(static_cast<std::size_t>(local_runs) * b, 0.0f);
    losses_.assign(static_cast<std::size_t>(local_runs), 0.0);
    for_each_trainable([&]<std::size_t K, class L>() {
      if (fp8_quantizer[K] != detail::none) payloads_[K].bytes.assign(L::dims::static_numel, std::byte{0});
    });
    // Every check first, on every rank: a data_parallel that throws leaves
    // the store as it was (made, dist::fsdp's shards take the store's copy
    // of the stacks' parameters, and a later check threw with them freed).
    check_ranks_agree(detail::fsdp_code(f));
    const std::uint32_t own_micro_batches = store_.micro_batches();
    store_.accumulate(static_cast<std::uint32_t>(local_runs));  // (FP8: one update per step, from all its runs)
    try {
      if (f) shards_.emplace(store_, *f, world_, first_shard(), local_runs_);  // (frees the store's copy last)
    } catch (...) {
      store_.accumulate(own_micro_batches);
      throw;
    }
    store_.join(this);
    store_.set_steps_run(store_.steps_run() + static_cast<std::uint64_t>(first_shard()));
  }
  bool emulating() const { return &comm_ == &own_; }
  // The global runs of the steps done: the store's count less this rank's
  // place and the runs of a step under way (each W apart on real ranks, one
  // apart emulating).
  std::uint64_t global_runs() const {
    const std::uint64_t under_way = static_cast<std::uint64_t>(runs_) * (emulating() ? 1u : static_cast<std::uint64_t>(world_));
    return store_.steps_run() - static_cast<std::uint64_t>(first_shard()) - under_way;
  }

  // Emulating: what the runs of a round (one micro-batch of every rank)
  // change, as it was before the round's first run.
  struct round_start {
    typename Store::commit_point store;
    std::vector<double> losses;
    std::vector<reduce_dtype> contributions;  // (a later round adds to the earlier rounds' sums)
    bool complete = false;
  };
  void take_round_start() {
    round_.store = store_.commit_point_now();
    round_.losses = losses_;
    if (runs_ > 0) round_.contributions = contributions_;
    round_.complete = complete_;
  }
  void undo_round() {
    store_.return_to(round_.store);
    losses_ = round_.losses;
    if (runs_ >= local_runs_) contributions_ = round_.contributions;
    complete_ = round_.complete;
    runs_ -= runs_ % local_runs_;
  }
  // Which payloads this run's quantize nodes take: those of weights whole
  // only in this rank's rows (after an update's gather, on real ranks);
  // where a weight is whole (made whole, loaded or written since), the
  // store quantizes it itself, the same bits. A step committed since the
  // gather may have changed a scale the payload was cast with (a step
  // whose gradient no update applied: the update failed, or a second step
  // replaced the first's gradient): then every rank casts and gathers
  // again. Every rank decides alike: the scales are the same everywhere.
  void refresh_fp8_payloads() {
    bool stale = false;
    auto serve = [&] {
      for_each_trainable([&]<std::size_t K, class L>() {
        if constexpr (fp8_quantizer[K] != detail::none) {
          using scale_leaf = typename tl::at_t<fp8_quantizer[K], typename step_type::nodes>::scaling::scale_leaf;
          fp8_value& p = payloads_[K];
          p.serves = p.valid && store_.template holds_rows_only<L>();
          stale = stale || (p.serves && p.value.scale != store_.template param<scale_leaf>()[0]);
        }
      });
    };
    serve();
    if (!stale) return;
    if (!optimizer_)
      throw error("ctg: data parallel: a weight gathered as fp8 is whole only in this rank's rows, and its scale "
                  "changed since its payload was cast; its optimizer (dist::sharded_adamw) no longer exists to "
                  "cast it again");
    optimizer_->cast_payloads_again();
    stale = false;
    serve();
  }
  // Does this process hold every rank's shards (emulating, or a world of one)?
  bool every_shard_here() const { return local_runs_ == world_; }

  // f.template operator()<K, L>() for every trainable leaf L, K its index.
  template <class F>
  static void for_each_trainable(F&& f) {
    tl::for_each_indexed<trainable>(f);
  }

  // This run's gradient, in the reduce dtype, as `world` blocks: block j
  // holds shard j of every leaf; written, or (a later micro-batch) added.
  void cut_into_shards(reduce_dtype* blocks, bool add) {
    for_each_trainable([&]<std::size_t K, class L>() {
      const auto g = store_.template grad<L>();
      const auto& slot = layout_.leaf[K];
      for (int j = 0; j < world_; ++j) {
        reduce_dtype* dst = blocks + static_cast<std::size_t>(j) * layout_.elements + slot.offset;
        slot.for_each_run(j, [&](const auto& run) {
          if (add)
            for (std::size_t i = 0; i < run.n; ++i)
              dst[run.packed + i] += static_cast<reduce_dtype>(load_as(g[run.whole + i]));
          else
            for (std::size_t i = 0; i < run.n; ++i)
              dst[run.packed + i] = static_cast<reduce_dtype>(load_as(g[run.whole + i]));
        });
      }
    });
  }

  // Every held shard of the global gradient: the ranks' pieces summed in
  // rank order, in f32; and the global loss.
  void reduce() {
    const std::size_t b = layout_.elements, w = static_cast<std::size_t>(world_);
    // Each rank's sum over its micro-batches (emulating: this process's, one per rank).
    std::span<const double> losses = losses_;
    if (!emulating()) {
      comm_.all_to_all(std::span<const reduce_dtype>(contributions_), std::span(received_), b);
      comm_.all_gather(std::span<const double>(losses_), std::span(rank_losses_));
      losses = rank_losses_;
    }
    for (int h = 0; h < local_runs_; ++h) {
      // Rank v's piece of shard j: received from v, or (emulating) run v's own block j.
      auto piece = [&](std::size_t v) {
        return emulating() ? contributions_.data() + (v * w + static_cast<std::size_t>(h)) * b
                           : received_.data() + v * b;
      };
      reduce_dtype* out = grads_.data() + static_cast<std::size_t>(h) * b;
      std::memcpy(out, piece(0), b * sizeof(reduce_dtype));
      for (std::size_t v = 1; v < w; ++v) {
        const reduce_dtype* p = piece(v);
        for (std::size_t i = 0; i < b; ++i) out[i] += p[i];
      }
    }
    double sum = 0.0;
    for (double l : losses) sum += l;
    loss_ = static_cast<float>(sum / static_cast<double>(w * static_cast<std::size_t>(micro_)));
  }

  // (Instantiated only with dist::fsdp.)
  static void check_fsdp_model() {
    static_assert(detail::stack_params_read_by_their_stack_only(typename step_type::nodes{}),
                  "ctg: dist::fsdp gathers a stack's parameters layer by layer inside that stack: a stacked "
                  "parameter read by a second stack (two stacks of one block) or outside its stack cannot be held "
                  "in shards; run this model's data_parallel without dist::fsdp");
  }

  // Every rank runs the same step, from the same values, at the same count,
  // with the same parameter sharding (one rank's layer gathers inside the
  // step would wait for ranks that gather none: a hang).
  void check_ranks_agree(std::int32_t fsdp_mode) {
    constexpr auto key = ctg::detail::key_of_step<step_type>::key;
    const std::int32_t busy = store_.in_replica_group() ? 1 : store_.accumulated() != 0 ? 2 : 0;
    detail::join_report mine{key.a, key.b, busy ? 0 : values_hash(), store_.seed(), world_, store_.steps_run(), fsdp_mode, busy};
    std::vector<detail::join_report> all(static_cast<std::size_t>(comm_.size()));
    comm_.all_gather(std::span<const detail::join_report>(&mine, 1), std::span(all));
    for (std::size_t r = 0; r < all.size(); ++r) {
      const std::string who = "ctg: data parallel: rank " + std::to_string(r);
      if (all[r].busy == 1)
        throw error(who + "'s store runs in another data_parallel already (a store joins one at a time): end that "
                          "one first; nothing was changed");
      if (all[r].busy == 2)
        throw error(who + "'s store is in the middle of a set of micro-batches (store.accumulate): run the rest "
                          "first; nothing was changed");
    }
    for (std::size_t r = 1; r < all.size(); ++r) {
      const std::string who = "ctg: data parallel: rank " + std::to_string(r);
      if (all[r].model_a != all[0].model_a || all[r].model_b != all[0].model_b)
        throw error(who + " runs another step than rank 0 (their steps' hashes differ); every rank builds the same model");
      if (all[r].world != all[0].world)
        throw error(who + " sees a world of " + std::to_string(all[r].world) + " ranks, rank 0 of " +
                    std::to_string(all[0].world));
      if (all[r].values_hash != all[0].values_hash)
        throw error(who + "'s parameters or FP8 state differ from rank 0's; initialise every rank the same way "
                          "(nn::init_params(store, seed) with one seed, or one checkpoint)");
      if (all[r].seed != all[0].seed)
        throw error(who + "'s dropout seed differs from rank 0's; every rank sets the same store.seed(s) (dropout "
                          "masks are keyed by the seed and the global run, so each rank's differ already)");
      if (all[r].steps_run != all[0].steps_run)
        throw error(who + " has run " + std::to_string(all[r].steps_run) + " steps, rank 0 " +
                    std::to_string(all[0].steps_run) + " (dropout masks are keyed by the count)");
      if (all[r].fsdp != all[0].fsdp)
        throw error(who + " makes its data_parallel " + detail::fsdp_text(all[r].fsdp) + ", rank 0 " +
                    detail::fsdp_text(all[0].fsdp) + "; every rank holds the parameters the same way");
    }
  }
  // A hash of every stored leaf's values (parameters, frozen leaves, FP8 state).
  std::uint64_t values_hash() {
    std::uint64_t h = fnv1a64_basis;
    detail::for_each_stored_leaf<step_type>([&]<class L>() {
      const auto p = store_.template param<L>();
      h = fnv1a64(reinterpret_cast<const unsigned char*>(p.data()), p.size_bytes(), h);
    });
    return h;
  }

  self_comm own_;  // (the communicator of an emulated world)
  Store& store_;
  communicator& comm_;
  int world_ = 1;
  int local_runs_ = 1;  // runs of one step this process makes: world_ when emulating, else 1
  layout_type layout_;
  std::vector<reduce_dtype> contributions_;  // [run][shard][block]: each run's gradient, cut into shards
  std::vector<reduce_dtype> received_;       // [rank][block]: every rank's piece of this rank's shard
  std::vector<reduce_dtype> grads_;          // [held shard][block]: the global gradient's shards
  std::vector<double> losses_;        // [rank this process plays]: the sum of its micro-batches' losses
  std::vector<double> rank_losses_;   // [rank]: every rank's, gathered
  std::vector<detail::run_report> reports_;  // [rank]: every rank's report of the last run
  std::vector<float> gathered_amax_;  // [rank][amax]
  detail::run_report first_run_{};    // (emulating: the round's first run, for the sizes check)
  round_start round_;                 // (emulating: the round under way, as it began)
  struct fp8_value {
    std::vector<std::byte> bytes;  // the whole payload
    quantized value;
    bool valid = false;   // holds the weight's value as gathered last
    bool serves = false;  // this run's quantize node takes it (refresh_fp8_payloads)
  };
  detail::data_parallel_optimizer* optimizer_ = nullptr;  // (attach)
  bool store_ended_ = false;  // (the store was destroyed first: store_ended)
  std::array<fp8_value, trainable::size + 1> payloads_{};  // by trainable leaf (those gathered as fp8)
  std::optional<stack_shards<Store>> shards_;  // dist::fsdp (none: every parameter whole between steps)
  int runs_ = 0;    // runs of this step so far
  int micro_ = 1;   // micro-batches per rank and step
  bool complete_ = false;
  float loss_ = 0.0f;
};

namespace detail {
// Can data_parallel run this store? A CPU store, yes. Not over a store whose
// memory the host cannot read (a CUDA store): gradients and parameters are
// reduced, sharded and gathered through host memory, so data_parallel runs
// CPU stores only. (The store of a mistake, invalid_store, reported
// already: it "can", and does nothing.)
template <class Store>
consteval bool host_replicable() {
  if constexpr (std::is_same_v<Store, invalid_store>) return true;
  else return Store::backend_type::host_memory;
}
// Stores whose data_parallel, sharded_adamw, dist::save and dist::load take
// every use and do nothing (the first reporting the mistake once), so the
// lines after it add no errors.
template <class Store>
concept null_replicated = std::is_same_v<Store, invalid_store> || !host_replicable<Store>();

template <class Store>
class null_data_parallel {
 public:
  using store_type = Store;
  using step_type = typename Store::step_type;
  template <class... Args>
  explicit null_data_parallel(Store& s, Args&&...) : store_(s) {}
  Store& store() { return store_; }
  communicator& comm() { return own_; }
  int world() const { return 1; }
  int first_shard() const { return 0; }
  int shards_held() const { return 1; }
  float loss() const { return 0.0f; }
  bool has_gradient() const { return false; }
  std::span<const f32> grad_shard(int) const { return {}; }
  void consume() {}
  void accumulate(int) {}
  int micro_batches() const { return 1; }
  int runs_done() const { return 0; }
  void resume_at(std::uint64_t) {}
  std::size_t resident_bytes() const { return 0; }
  std::size_t gathered_bytes() const { return 0; }
  void make_whole() {}
  void reshard() {}

 private:
  Store& store_;
  self_comm own_;
};
}  // namespace detail

// Over the store of a mistake, or a store data_parallel cannot run (reported
// here once: the store's own param<L>() would report it thrice, pointing at
// copies the user did not write).
template <step_store Store>
  requires detail::null_replicated<Store>
class data_parallel<Store> : public detail::null_data_parallel<Store> {
  static_assert(detail::host_replicable<Store>(),
                "ctg: dist::data_parallel runs CPU stores only: a store whose memory is a GPU's (a CUDA store) "
                "under data_parallel is not built yet");

 public:
  using detail::null_data_parallel<Store>::null_data_parallel;
};

}  // namespace ctg::dist

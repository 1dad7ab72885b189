#pragma once
// dist::sharded_adamw: AdamW (optim/adamw.hpp: the same update, element for
// element) over a data-parallel run, each rank keeping the moments and the
// f32 master of its dim-0 shard of every trainable leaf only.
//
// One step(lr), after a complete data-parallel step:
//   1. each rank's sum of squares of its gradient shard, per leaf (double,
//      as optim::adamw), and whether its shard of a narrow parameter still
//      holds its master's rounding; one all-gather gives every rank all of
//      them. The norm is the sum over ranks, in rank order, of each rank's
//      sum over leaves (so one process emulating W ranks gets the same
//      bits). A non-finite gradient or a written parameter throws
//      ctg::error on every rank, naming the leaf and the rank, and nothing
//      is updated;
//   2. each rank updates its shard (clipping as optim::adamw) and rounds it
//      to the parameter's dtype;
//   3. one all-gather of the updated shards, in the parameters' own dtypes
//      (count x sizeof(dtype) bytes each), makes every rank's parameters
//      whole again; a weight used only as shard(quantize(w)) travels as
//      its fp8 payload and amax instead (dist/data_parallel.hpp); under
//      dist::fsdp a stack's parameters stay in shards, updated there and
//      gathered layer by layer as the next step runs.
// Frozen leaves are not trainable: no state, no gradient, never gathered
// (every rank holds them whole, from the same values).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ctg/dist/data_parallel.hpp>
#include <ctg/optim/adamw.hpp>

namespace ctg::dist {

namespace detail {
enum class state_kind { master, exp_avg, exp_avg_sq };
// Visits an optim::adamw's checkpoint records (its state_records hook):
// f.template operator()<K>(values, kind) per trainable leaf K and kind.
template <class Trainable, class F>
struct state_visitor {
  F& f;
  template <fixed_string Kind, class L, class T>
  void leaf(std::span<T> values) {
    constexpr std::size_t K = tl::index_of<L, Trainable>::value;
    constexpr std::string_view kind = Kind.c_str();
    if constexpr (kind == "master") f.template operator()<K>(values, state_kind::master);
    else if constexpr (kind == "exp_avg") f.template operator()<K>(values, state_kind::exp_avg);
    else f.template operator()<K>(values, state_kind::exp_avg_sq);
  }
  template <class T>
  void scalar(std::string_view, T&) {}
  template <class T>
  void scalar(std::string_view, T&, std::uint32_t, std::remove_const_t<T>) {}
};
}  // namespace detail

template <step_store Store>
class sharded_adamw : detail::data_parallel_optimizer {
 public:
  using step_type = typename Store::step_type;
  using trainable = typename step_type::wrt;

  // Takes the masters of this rank's shards from the store's parameters.
  explicit sharded_adamw(data_parallel<Store>& parallel, optim::adamw_config cfg = {}) : dp_(&parallel), cfg_(cfg) {
    static_assert(trainable::size > 0 || std::is_same_v<step_type, invalid_step>,  // (invalid: already reported)
                  "ctg: adamw needs a step with trainable leaves (value_and_grad)");
    cfg_.validate();
    slots_.resize(trainable::size * static_cast<std::size_t>(dp().shards_held()));
    checks_mine_.resize(trainable::size * static_cast<std::size_t>(dp().shards_held()));
    checks_all_.resize(trainable::size * static_cast<std::size_t>(dp().world()));
    std::size_t at = 0;
    for_each_trainable([&]<std::size_t K, class L>() {
      for (int h = 0; h < dp().shards_held(); ++h) {
        const std::size_t n = this->template shard_elements<K>(h);
        slot& s = slots_[slot_index(K, h)];
        s.exp_avg = at;
        s.exp_avg_sq = at + n;
        at += 2 * n;
        if constexpr (ctg::detail::has_master_copy<typename L::dtype>) {
          s.master = at;
          at += n;
        }
      }
    });
    state_.assign(at, 0.0f);
    take_masters();
    dp().attach(this);
  }
  ~sharded_adamw() {
    if (dp_) dp_->detach(this);
  }
  sharded_adamw(const sharded_adamw&) = delete;  // (its data_parallel calls back into this one)
  sharded_adamw& operator=(const sharded_adamw&) = delete;

  // One update with the configured lr, or this lr. Returns the global
  // gradient norm before clipping.
  float step() { return step(cfg_.lr); }
  float step(float lr) {
    ctg::detail::check_adamw_lr(lr);
    const auto alone = dp().store().hold_alone();  // (no step runs on the store meanwhile)
    if (!dp().has_gradient())
      throw error("ctg: adamw: no gradients since the last update (each set is applied once): run a step on "
                  "every rank first; nothing was updated");
    const float total = checked_norm();
    const optim::adamw_config cfg = cfg_;
    const auto step_coeffs = ctg::detail::adamw_coeffs_for(cfg, lr, steps_ + 1, total);
    for_each_trainable([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      const auto c = ctg::detail::adamw_coeffs_of_leaf<typename step_type::nodes, L>(step_coeffs, cfg);
      const auto& leaf = dp().layout().leaf[K];
      for (int h = 0; h < dp().shards_held(); ++h) {
        const slot& s = slots_[slot_index(K, h)];
        const float* g = dp().grad_shard(h).data() + leaf.offset;
        float* m = state_.data() + s.exp_avg;
        float* v = state_.data() + s.exp_avg_sq;
        this->template for_each_run<K>(h, [&](const auto& r) {
          T* p = this->template params_of<K, L>(h, r);
          if constexpr (ctg::detail::has_master_copy<T>)
            ctg::detail::adamw_update<T, float>(g + r.packed, state_.data() + s.master + r.packed, m + r.packed,
                                                v + r.packed, p, r.n, c);
          else
            ctg::detail::adamw_update<T, float>(g + r.packed, p, m + r.packed, v + r.packed, nullptr, r.n, c);
        });
      }
    });
    gather_parameters(false);
    ++steps_;
    dp().consume();
    return total;
  }

  std::int64_t steps() const { return steps_; }
  const optim::adamw_config& config() const { return cfg_; }
  // Throws ctg::error unless this optimizer updates `parallel` (dist::save
  // and dist::load pair them: another's state would go with its parameters).
  void check_data_parallel(const data_parallel<Store>& parallel) const {
    if (&dp() != &parallel)
      throw error("ctg: adamw: this sharded_adamw was made for another data_parallel (its moments, masters and step "
                  "count are that one's): pass the optimizer made for this one; nothing was changed");
  }

  // Every rank's parameters whole, weights gathered as fp8 included (every
  // rank calls it; dist::save does).
  void gather_whole_parameters() { gather_parameters(true); }

  // This process's state of leaf L, shard first_shard() + h (its rows only).
  template <class L>
  std::span<const float> exp_avg(int h = 0) const {
    constexpr std::size_t K = tl::index_of<L, trainable>::value;
    return {state_.data() + slots_[slot_index(K, h)].exp_avg, this->template shard_elements<K>(h)};
  }
  template <class L>
  std::span<const float> exp_avg_sq(int h = 0) const {
    constexpr std::size_t K = tl::index_of<L, trainable>::value;
    return {state_.data() + slots_[slot_index(K, h)].exp_avg_sq, this->template shard_elements<K>(h)};
  }
  // The f32 floats of optimizer state this process holds.
  std::size_t state_elements() const { return state_.size(); }

  // The whole state (every rank's shards) into `whole`, an optim::adamw of
  // the same store: what a checkpoint saves (dist/checkpoint.hpp). Every
  // rank calls it (one all-gather per leaf and kind of state).
  void gather_into(optim::adamw<Store>& whole) {
    visit_whole(whole, [&]<std::size_t K>(std::span<float> all, detail::state_kind which) {
      const auto kind = field(which);
      const auto& leaf = dp().layout().leaf[K];
      const std::size_t per = leaf.part_elements();
      auto place = [&](int rank, const float* packed) {
        leaf.for_each_run(rank, [&](const auto& r) {
          if (r.n) std::memcpy(all.data() + r.whole, packed + r.packed, r.n * sizeof(float));
        });
      };
      if (dp().shards_held() == dp().world()) {
        for (int h = 0; h < dp().shards_held(); ++h) place(h, state_.data() + slots_[slot_index(K, h)].*kind);
        return;
      }
      std::vector<float> mine(per), every(per * static_cast<std::size_t>(dp().world()));
      if (this->template shard_elements<K>(0))
        std::memcpy(mine.data(), state_.data() + slots_[slot_index(K, 0)].*kind, this->template shard_elements<K>(0) * sizeof(float));
      dp().comm().all_gather(std::span<const float>(mine), std::span(every));
      for (int r = 0; r < dp().world(); ++r) place(r, every.data() + static_cast<std::size_t>(r) * per);
    });
    whole.set_steps(steps_);
  }
  // This process's shards, the step count and the configuration taken from
  // `whole` (what a checkpoint loaded).
  void take_from(optim::adamw<Store>& whole) {
    visit_whole(whole, [&]<std::size_t K>(std::span<float> all, detail::state_kind which) {
      const auto kind = field(which);
      for (int h = 0; h < dp().shards_held(); ++h) {
        float* packed = state_.data() + slots_[slot_index(K, h)].*kind;
        this->template for_each_run<K>(h, [&](const auto& r) {
          if (r.n) std::memcpy(packed + r.packed, all.data() + r.whole, r.n * sizeof(float));
        });
      }
    });
    steps_ = whole.steps();
    cfg_ = whole.config();
  }

 private:
  struct slot {
    std::size_t exp_avg = 0, exp_avg_sq = 0, master = 0;
  };
  // Per rank, per leaf: the shard's sum of squares and whether its parameter was written.
  struct leaf_check {
    double sum_of_squares = 0.0;
    double written = 0.0;  // 1: the parameter no longer holds its master's rounding
  };

  std::size_t slot_index(std::size_t k, int h) const { return k * static_cast<std::size_t>(dp().shards_held()) + static_cast<std::size_t>(h); }
  template <std::size_t K>
  std::size_t shard_elements(int h) const {
    return dp().layout().leaf[K].held_elements(dp().first_shard() + h);
  }
  // f(run) for each contiguous run of shard first_shard() + h of leaf K.
  template <std::size_t K, class F>
  void for_each_run(int h, F&& f) const {
    dp().layout().leaf[K].for_each_run(dp().first_shard() + h, f);
  }
  // Is leaf K's value held in shards only (a stack's, under dist::fsdp)?
  template <std::size_t K>
  bool held_in_shards() const {
    return data_parallel<Store>::template stacked<K> && dp().holds_stacked_params();
  }
  // The parameter values of one run of shard first_shard() + h of leaf L:
  // in the store's whole copy, or in the shard (fsdp).
  template <std::size_t K, class L, class Run>
  typename L::dtype* params_of(int h, const Run& r) {
    if (this->template held_in_shards<K>()) return dp().template resident_rows<K, L>(h) + r.packed;
    return dp().store().template own_rows<L>().data() + r.whole;
  }

  // f.template operator()<K>(whole's span, which) for every piece of state
  // `whole` names (its checkpoint records), in its order.
  template <class F>
  static void visit_whole(optim::adamw<Store>& whole, F&& f) {
    detail::state_visitor<trainable, F> r{f};
    whole.state_records(r);
  }
  using slot_field = std::size_t slot::*;
  static slot_field field(detail::state_kind k) {
    return k == detail::state_kind::master ? &slot::master
           : k == detail::state_kind::exp_avg ? &slot::exp_avg : &slot::exp_avg_sq;
  }

  template <class F>
  static void for_each_trainable(F&& f) {
    tl::for_each_indexed<trainable>(f);
  }

  void take_masters() {
    for_each_trainable([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      if constexpr (ctg::detail::has_master_copy<T>) {
        for (int h = 0; h < dp().shards_held(); ++h) {
          float* w = state_.data() + slots_[slot_index(K, h)].master;
          this->template for_each_run<K>(h, [&](const auto& r) {
            const T* p = this->template params_of<K, L>(h, r);
            for (std::size_t i = 0; i < r.n; ++i) w[r.packed + i] = static_cast<float>(load_as<T>(p[i]));
          });
        }
      }
    });
  }

  // Pass 1: every rank's checks, gathered; the norm, or an error on every rank.
  float checked_norm() {
    constexpr std::size_t n = trainable::size;
    const int world = dp().world();
    std::vector<leaf_check>& mine = checks_mine_;
    for_each_trainable([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      for (int h = 0; h < dp().shards_held(); ++h) {
        leaf_check& c = mine[static_cast<std::size_t>(h) * n + K];
        c.sum_of_squares =
            ctg::detail::sum_of_squares(dp().grad_shard(h).data() + dp().layout().leaf[K].offset, this->template shard_elements<K>(h));
        if constexpr (ctg::detail::has_master_copy<T>) {
          const float* w = state_.data() + slots_[slot_index(K, h)].master;
          bool written = false;
          this->template for_each_run<K>(h, [&](const auto& r) {
            written = written || ctg::detail::first_master_mismatch(this->template params_of<K, L>(h, r), w + r.packed, r.n) != r.n;
          });
          c.written = written;
        }
      }
    });
    std::span<const leaf_check> all = mine;  // (one process holding every shard has them all)
    if (dp().shards_held() != world) {
      dp().comm().all_gather(std::span<const leaf_check>(mine), std::span(checks_all_));
      all = checks_all_;
    }

    double total_sq = 0.0;
    for (int r = 0; r < world; ++r) {
      double rank_sq = 0.0;
      for (std::size_t k = 0; k < n; ++k) {
        const leaf_check& c = all[static_cast<std::size_t>(r) * n + k];
        if (!std::isfinite(c.sum_of_squares))
          throw error("ctg: adamw: the gradient of '" + name_of(k) + "' is not finite in rank " + std::to_string(r) +
                      "'s shard; nothing was updated");
        if (c.written != 0.0)
          throw error("ctg: adamw: parameter '" + name_of(k) + "' (rank " + std::to_string(r) +
                      "'s shard) was written after the optimizer last set it: an update would undo the write; "
                      "nothing was updated");
        rank_sq += c.sum_of_squares;
      }
      total_sq += rank_sq;
    }
    if (!std::isfinite(total_sq)) throw error("ctg: adamw: the global gradient norm overflows; nothing was updated");
    return static_cast<float>(std::sqrt(total_sq));
  }

  static std::string name_of(std::size_t k) {
    std::string s;
    for_each_trainable([&]<std::size_t K, class L>() {
      if (K == k) s = L::name.c_str();
    });
    return s;
  }

  // Is leaf K gathered as fp8 bytes (unless `whole` asks for its own dtype)?
  template <std::size_t K>
  static constexpr bool as_fp8 = data_parallel<Store>::fp8_quantizer[K] != detail::none;
  // Leaf K's part of a rank's block, in bytes: its padded rows in its dtype,
  // or in its fp8 format followed by their amax; none for a leaf held in
  // shards (gathered layer by layer as the step runs, or by make_whole).
  template <std::size_t K, class L>
  std::size_t part_bytes(bool whole) const {
    if (this->template held_in_shards<K>()) return 0;
    const std::size_t n = dp().layout().leaf[K].part_elements();
    if (as_fp8<K> && !whole) return n + sizeof(float);
    return n * sizeof(typename L::dtype);
  }
  template <std::size_t K>
  using quantizer_of = tl::at_t<data_parallel<Store>::fp8_quantizer[K], typename step_type::nodes>;

  // Pass 3: every rank's updated rows, to every rank.
  void gather_parameters(bool whole) {
    if (whole) dp().make_whole();  // (fsdp: the stacks' parameters)
    if (dp().shards_held() == dp().world()) return;  // (one process updated every shard in place)
    std::size_t block = 0;
    for_each_trainable([&]<std::size_t K, class L>() { block += this->template part_bytes<K, L>(whole); });
    std::vector<std::byte>&send = send_, &recv = recv_;  // (kept: their sizes repeat every step)
    send.resize(block);
    recv.resize(block * static_cast<std::size_t>(dp().world()));
    std::size_t at = 0;
    for_each_trainable([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      if (this->template held_in_shards<K>()) return;
      if constexpr (as_fp8<K>) {
        if (!whole) {  // (a weight outside any stack: its shard is one run)
          const auto run = dp().layout().leaf[K].run_of(dp().first_shard(), 0);
          using Q = quantizer_of<K>;
          const float scale = dp().store().template param<typename Q::scaling::scale_leaf>()[0];
          const float amax = detail::quantize_rows<typename Q::dtype>(this->template params_of<K, L>(0, run), run.n, scale,
                                                                      send.data() + at);
          std::memcpy(send.data() + at + this->template part_bytes<K, L>(whole) - sizeof(float), &amax, sizeof(float));
          at += this->template part_bytes<K, L>(whole);
          return;
        }
      }
      this->template for_each_run<K>(0, [&](const auto& r) {
        if (r.n) std::memcpy(send.data() + at + r.packed * sizeof(T), this->template params_of<K, L>(0, r), r.n * sizeof(T));
      });
      at += this->template part_bytes<K, L>(whole);
    });
    dp().comm().all_gather(std::span<const std::byte>(send), std::span(recv));
    std::array<float, trainable::size + 1> amax{};  // (fp8 leaves: folded from 0 in rank order)
    for (int r = 0; r < dp().world(); ++r) {
      std::size_t from = static_cast<std::size_t>(r) * block;
      for_each_trainable([&]<std::size_t K, class L>() {
        using T = typename L::dtype;
        const auto& leaf = dp().layout().leaf[K];
        if (this->template held_in_shards<K>()) return;
        if (as_fp8<K> && !whole) {
          const auto run = leaf.run_of(r, 0);
          if (run.n) std::memcpy(dp().fp8_payload(K) + run.whole, recv.data() + from, run.n);
          float a;
          std::memcpy(&a, recv.data() + from + this->template part_bytes<K, L>(whole) - sizeof(float), sizeof(float));
          amax[K] = fp8_scaling::amax_combine(amax[K], a);
        } else if (r != dp().first_shard()) {
          T* values = dp().store().template own_rows<L>().data();
          leaf.for_each_run(r, [&](const auto& run) {
            if (run.n) std::memcpy(values + run.whole, recv.data() + from + run.packed * sizeof(T), run.n * sizeof(T));
          });
        }
        from += this->template part_bytes<K, L>(whole);
      });
    }
    for_each_trainable([&]<std::size_t K, class L>() {
      if constexpr (as_fp8<K>) {
        dp().store().template hold_rows_only<L>(!whole);
        if (!whole)
          dp().fp8_gathered(K, amax[K], dp().store().template param<typename quantizer_of<K>::scaling::scale_leaf>()[0]);
      }
    });
  }

  // The data_parallel this updates; null once it ended or another optimizer
  // was made for it (released): every use is then an error, not a read of
  // a data_parallel that is gone.
  data_parallel<Store>* dp_;
  data_parallel<Store>& dp() const {
    if (!dp_)
      throw error("ctg: adamw: this sharded_adamw's data_parallel has ended, or another sharded_adamw was made for "
                  "it: make one for the data_parallel you train (dist::sharded_adamw opt(dp)); nothing was changed");
    return *dp_;
  }
  void cast_payloads_again() override { gather_parameters(false); }
  void released() override { dp_ = nullptr; }
  optim::adamw_config cfg_;
  std::vector<slot> slots_;  // [leaf][held shard]
  std::vector<leaf_check> checks_mine_, checks_all_;  // [held shard][leaf], [rank][leaf]
  std::vector<std::byte> send_, recv_;                // the parameters' all-gather
  std::vector<float> state_;
  std::int64_t steps_ = 0;
};

// Over a data_parallel that does nothing (data_parallel.hpp,
// detail::null_replicated): takes every use, does nothing.
template <step_store Store>
  requires detail::null_replicated<Store>
class sharded_adamw<Store> {
 public:
  explicit sharded_adamw(data_parallel<Store>&, optim::adamw_config cfg = {}) : cfg_(cfg) {}
  float step() { return 0.0f; }
  float step(float) { return 0.0f; }
  std::int64_t steps() const { return 0; }
  const optim::adamw_config& config() const { return cfg_; }
  std::span<const float> exp_avg(int = 0) const { return {}; }
  std::span<const float> exp_avg_sq(int = 0) const { return {}; }
  std::size_t state_elements() const { return 0; }
  void check_data_parallel(const data_parallel<Store>&) const {}
  void gather_whole_parameters() {}
  template <class Whole>
  void gather_into(Whole&) {}
  template <class Whole>
  void take_from(Whole&) {}

 private:
  optim::adamw_config cfg_;
};

}  // namespace ctg::dist

#pragma once
// Save and load a store's state (every stored leaf: trainable, frozen and FP8
// state; the dropout seed and the step count), and optionally an optimizer's,
// to one state file (format: ctg/io/state_file.hpp). Training resumed from a
// file is bitwise the training that was never stopped.
//
//   ctg::io::save("ckpt.ctg", store, opt);   // store + optimizer: resume training exactly
//   ctg::io::load("ckpt.ctg", store, opt);   // into a store/optimizer of the same model
//   ctg::io::save("model.ctg", store);       // store only
//   ctg::io::load("model.ctg", store);       // store only (optimizer records are ignored)
//
// (ctg::optim::save / load are the same functions.) Writing is atomic: see
// ctg/io/state_file.hpp.
//
// load reads the whole file into memory and checks all of it before it
// writes anything. Any problem throws ctg::error and leaves the store and the
// optimizer untouched: a wrong magic or version, a truncated file, a bad
// checksum, a malformed or duplicated record, a record missing for a leaf (or
// for optimizer state), a record the model does not have, a record whose
// dtype, dims or byte count differ from the model's, optimizer state the
// optimizer rejects, or a value no run or update could have written (a NaN
// or inf moment or master, a negative exp_avg_sq, an FP8 scale that is 0,
// negative, NaN or inf, a negative amax: value_rule). The message names the record ("param 'mlp.w1'"), the
// expected and the found value. load(path, store, opt) requires exactly the
// records save(path, store, opt) writes for this model; load(path, store)
// requires exactly the store's records and ignores the others. load also
// restores the optimizer's configuration (for AdamW: lr, betas, eps,
// weight_decay, max_grad_norm, decay), as torch's load_state_dict restores
// param_groups. A version-1 file has no seed or step count: the store keeps
// its own; a file before version 3 has no AdamW decay: it was every leaf's.
//
// What a store provides (any backend): `typename Store::step_type`,
// `store.template param<L>()` (a span over a stored leaf's values) or, where
// the host cannot read its memory (a GPU's), `store.download(L{}, span)` and
// `store.upload(L{}, span)`, `store.seed()` / `store.seed(s)`,
// `store.steps_run()` / `store.set_steps_run(n)`. The file is the same for
// every backend: a GPU store's values are copied to the host to be saved,
// and copied back once a load has checked the whole file.
//
// What an optimizer provides to take part (see ctg::optim::adamw):
//   using store_type = Store;
//   template <class Records> void state_records(Records& r);         // and a const overload
//     names every piece of state: r.template leaf<"exp_avg", L>(std::span<float>) per leaf
//     (a kind from the state file's table), or r.template copied_leaf<"exp_avg", L, float>(
//     count, fetch, put) for state in a device's memory; r.scalar("adamw.lr", value) per scalar;
//   void validate_state() const;   // throws ctg::error if the scalars are not valid
// load writes the scalars, calls validate_state() (restoring them if it throws), and
// only then writes the leaf records.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <ctg/core/dtype_traits.hpp>
#include <ctg/core/error.hpp>
#include <ctg/core/fixed_string.hpp>
#include <ctg/core/type_list.hpp>
#include <ctg/graph/step.hpp>
#include <ctg/io/between_sets.hpp>
#include <ctg/io/host_copies.hpp>
#include <ctg/io/state_file.hpp>

namespace ctg {
namespace detail {

// The state file's dtype code of a C++ type.
template <class T>
consteval std::uint8_t state_dtype_code() {
  constexpr std::string_view name = [] {
    if constexpr (std::is_same_v<T, std::int64_t>) return std::string_view("i64");
    else if constexpr (std::is_same_v<T, std::uint64_t>) return std::string_view("u64");
    else return std::string_view(dtype_traits<T>::name);
  }();
  constexpr std::uint8_t code = state_file::code_of(state_file::dtypes, name);
  static_assert(code != 0, "ctg: the state file has no dtype code for this type");
  return code;
}

// What a record's values must be for any run or update to have written them:
// a load checks them before it writes anything. (A NaN or negative exp_avg_sq,
// or an FP8 scale of 0, behind a valid checksum loaded, and the next update
// wrote NaN into a weight, or the next step's FP8 products were all 0,
// without an error.)
enum class value_rule : std::uint8_t { any, finite, finite_nonnegative, finite_positive, not_negative };

// A record of this model, store or optimizer, and where load writes its values.
struct wanted_record {
  state_file::record rec;  // what the file must hold; rec.data is the source for save
  std::byte* destination;  // for load; nullptr when collected for save
  value_rule rule = value_rule::any;
  std::uint32_t since = state_file::oldest_version;  // the first file version that holds it
  // A scalar's value in files before `since` (what every run that wrote one
  // had), which load writes as if read; none: load leaves it as it is.
  bool has_older = false;
  std::array<std::byte, 8> older{};
};

// The rule of a record of kind Kind for leaf L: an optimizer's masters and
// first moments are finite, its second moments >= 0 too; of a state leaf, an
// FP8 scale (it starts at 1) is finite and > 0, an amax history (it starts at
// 0) not negative (a NaN or inf amax is recorded as TransformerEngine records
// it: core/fp8_scaling.hpp).
template <fixed_string Kind, class L>
consteval value_rule rule_of() {
  const std::string_view kind = Kind.c_str();
  if (kind == "master" || kind == "exp_avg") return value_rule::finite;
  if (kind == "exp_avg_sq") return value_rule::finite_nonnegative;
  if constexpr (requires { L::initial_value; })
    if (kind == "param" && L::role == leaf_role::state)
      return L::initial_value > 0 ? value_rule::finite_positive : value_rule::not_negative;
  return value_rule::any;
}

// The collector an optimizer's state_records() fills, and that save and load
// read: one wanted_record per piece of state.
class record_list {
 public:
  std::vector<wanted_record> records;

  // A per-leaf record of kind Kind (a name in the state file's kind table), L's name and dims.
  template <fixed_string Kind, class L, class T>
  void leaf(std::span<T> values) {
    constexpr std::uint8_t kind = state_file::code_of(state_file::kinds, Kind.c_str());
    static_assert(kind != 0, "ctg: the state file has no record kind of this name");
    add(kind, std::string_view(L::name.c_str(), L::name.size()),
        std::span<const dim_t>(L::dims::dims.data(), L::dims::rank), values);
    records.back().rule = rule_of<Kind, L>();
  }
  // The same for values the host cannot read (a GPU's): a host copy, which
  // fetch(std::span<T>) fills now (what save writes) and, once a load has
  // written it, put(std::span<const T>) copies back (finish_load()).
  template <fixed_string Kind, class L, class T, class Fetch, class Put>
  void copied_leaf(std::size_t count, Fetch&& fetch, Put put) {
    leaf<Kind, L>(host_copies_.add<T>(count, std::forward<Fetch>(fetch), std::move(put)));
  }
  // After a load has written every record: the host copies back where they came from.
  void finish_load() {
    host_copies_.put_back();
  }

  // An optimizer scalar (kind "scalar", rank 0). An enum is stored as its
  // underlying integer.
  template <class T>
  void scalar(std::string_view name, T& value) {
    add(state_file::code_of(state_file::kinds, "scalar"), name, {}, std::span<T>(&value, 1));
  }
  // One that files hold since version `since`; loading an older file gives
  // it `older`, the value every run that wrote such a file had.
  template <class T>
  void scalar(std::string_view name, T& value, std::uint32_t since, std::remove_const_t<T> older) {
    static_assert(sizeof(T) <= 8);
    scalar(name, value);
    wanted_record& w = records.back();
    w.since = since;
    w.has_older = true;
    std::memcpy(w.older.data(), &older, sizeof(T));
  }
  // A store scalar (kind "store", rank 0).
  template <class T>
  void store_scalar(std::string_view name, T& value) {
    add(state_file::code_of(state_file::kinds, "store"), name, {}, std::span<T>(&value, 1));
  }

 private:
  template <class T>
  void add(std::uint8_t kind, std::string_view name, std::span<const dim_t> dims, std::span<T> values) {
    using E = std::remove_const_t<T>;
    wanted_record w{};
    w.rec.kind = kind;
    if constexpr (std::is_enum_v<E>) w.rec.dtype = state_dtype_code<std::underlying_type_t<E>>();
    else w.rec.dtype = state_dtype_code<E>();
    w.rec.rank = static_cast<std::uint8_t>(dims.size());
    w.rec.name = name;
    for (std::size_t i = 0; i < dims.size(); ++i) w.rec.dims[i] = dims[i];
    w.rec.bytes = values.size_bytes();
    w.rec.data = reinterpret_cast<const std::byte*>(values.data());
    if constexpr (!std::is_const_v<T>) w.destination = reinterpret_cast<std::byte*>(values.data());
    records.push_back(w);
  }

  host_copies host_copies_;
};

// Every stored leaf of the store's step (trainable, frozen, FP8 state), in topological order.
template <class Store>
void param_records(record_list& out, Store& store) {
  [&]<class... Ls>(tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (L::fed) {
      } else if constexpr (Store::backend_type::host_memory) {
        out.template leaf<"param", L>(store.template param<L>());
      } else {
        using T = typename L::dtype;
        out.template copied_leaf<"param", L, T>(
            L::dims::static_numel, [&](std::span<T> host) { store.download(L{}, host); },
            [&store](std::span<const T> host) { store.upload(L{}, host); });
      }
    };
    (one(std::type_identity<Ls>{}), ...);
    (void)one;
  }(leaves_t<typename Store::step_type::nodes>{});
}

// The store's dropout key (seed, steps run) as the u64 values save writes, or
// load fills and then commit()s (a step_store's are u64 too).
template <class Store>
struct store_key {
  std::uint64_t seed = 0, steps_run = 0;

  static store_key of(const Store& s) { return {s.seed(), s.steps_run()}; }
  void add_to(record_list& out) {
    out.store_scalar("seed", seed);
    out.store_scalar("steps_run", steps_run);
  }
  void commit(Store& s) const {
    s.seed(seed);
    s.set_steps_run(steps_run);
  }
};

template <class Optimizer, class Store>
constexpr void check_optimizer() {
  static_assert(requires(Optimizer& o, record_list& r) {
    o.state_records(r);
    o.validate_state();
  }, "ctg: this optimizer cannot be saved: it has no state_records() / validate_state() hook");
  static_assert(std::is_same_v<typename Optimizer::store_type, Store>,
                "ctg: this optimizer belongs to a store of another step");
}

inline std::string file_where(const std::filesystem::path& path) { return "ctg: state file '" + path.string() + "': "; }

// For each wanted record, its record in the file. Throws, naming the record,
// on a duplicate, a missing record, another dtype, dims or byte count, or a
// file record that nothing wants (records held by an optimizer are ignored
// when `with_optimizer` is false). A wanted kind or record newer than the
// file's version is not expected (nullptr).
inline std::vector<const state_file::record*> match_records(const state_file::contents& file,
                                                           std::span<const wanted_record> want, bool with_optimizer,
                                                           const std::string& where) {
  std::map<std::pair<std::uint8_t, std::string_view>, std::size_t> index;
  for (std::size_t i = 0; i < file.records.size(); ++i) {
    const state_file::record& r = file.records[i];
    if (!index.emplace(std::pair(r.kind, r.name), i).second) throw error(where + r.what() + " occurs twice");
  }
  std::vector<bool> used(file.records.size(), false);
  std::vector<const state_file::record*> src(want.size(), nullptr);
  for (std::size_t k = 0; k < want.size(); ++k) {
    const state_file::record& w = want[k].rec;
    if (state_file::row_of(state_file::kinds, w.kind)->since > file.version || want[k].since > file.version) continue;
    const auto it = index.find(std::pair(w.kind, w.name));
    if (it == index.end()) throw error(where + w.what() + ": expected " + w.type_text() + ", found no such record");
    const state_file::record& r = file.records[it->second];
    if (r.dtype != w.dtype)
      throw error(where + w.what() + ": expected dtype " + std::string(state_file::dtype_name(w.dtype)) + ", found " +
                  std::string(state_file::dtype_name(r.dtype)));
    if (!std::ranges::equal(r.shape(), w.shape()))
      throw error(where + w.what() + ": expected dims " + dims_text(w.shape()) + ", found " + dims_text(r.shape()));
    if (r.bytes != w.bytes)
      throw error(where + w.what() + ": expected " + std::to_string(w.bytes) + " data bytes, found " +
                  std::to_string(r.bytes));
    used[it->second] = true;
    src[k] = &r;
  }
  for (std::size_t i = 0; i < file.records.size(); ++i) {
    const state_file::record& r = file.records[i];
    const state_file::holder h = state_file::holder_of(r.kind);
    if (used[i] || (h == state_file::holder::optimizer && !with_optimizer)) continue;
    for (const wanted_record& w : want)
      if (w.rec.kind == r.kind && w.rec.name == r.name)  // (wanted, but not from a file this old)
        throw error(where + r.what() + " is a record of version " + std::to_string(w.since) +
                    " files, found in a version-" + std::to_string(file.version) + " file: the file is corrupt");
    throw error(where + r.what() + " (" + r.type_text() + ") is in the file but not in this " +
                std::string(state_file::holder_names[static_cast<std::size_t>(h)]) + ": expected no such record");
  }
  return src;
}

// The f32 values of record r against its rule (values of other types have none).
inline void check_values(const state_file::record& r, value_rule rule, const std::string& where) {
  if (rule == value_rule::any || r.dtype != state_dtype_code<float>()) return;
  for (std::uint64_t i = 0; i < r.elements(); ++i) {
    float v;
    state_file::copy_le(&v, r.data + 4 * i, 4, 1);
    const bool ok = rule == value_rule::not_negative
                        ? !(v < 0.0f)
                        : std::isfinite(v) && (rule == value_rule::finite || v > 0.0f ||
                                               (rule == value_rule::finite_nonnegative && v == 0.0f));
    if (ok) continue;
    const char* what = rule == value_rule::finite                ? "finite"
                       : rule == value_rule::finite_nonnegative ? "finite and >= 0"
                       : rule == value_rule::finite_positive    ? "finite and > 0"
                                                                : "not negative";
    throw error(where + r.what() + ": element " + std::to_string(i) + " is " + std::to_string(v) + ", where it is " +
                what + ": the file is corrupt; nothing was loaded");
  }
}

// Reads, matches and checks everything, then writes: the scalars first (kept
// for `validate` to check, and put back if it throws), then every other record.
template <class Validate>
void load_records(const std::filesystem::path& path, std::span<const wanted_record> want, bool with_optimizer,
                  Validate&& validate) {
  const std::string where = file_where(path);
  const std::vector<std::byte> bytes = state_file::read(path);
  const state_file::contents file = state_file::parse(bytes, path.string());
  const std::vector<const state_file::record*> src = match_records(file, want, with_optimizer, where);
  for (std::size_t k = 0; k < want.size(); ++k)
    if (src[k]) check_values(*src[k], want[k].rule, where);

  // (A scalar newer than the file takes its value in older files.)
  auto older = [&](std::size_t k) { return !src[k] && want[k].has_older && want[k].since > file.version; };
  auto is_scalar = [&](std::size_t k) {
    return (src[k] || older(k)) && want[k].rec.rank == 0 &&
           state_file::holder_of(want[k].rec.kind) != state_file::holder::model;
  };
  std::vector<std::byte> saved;
  for (std::size_t k = 0; k < want.size(); ++k)
    if (is_scalar(k)) saved.insert(saved.end(), want[k].destination, want[k].destination + want[k].rec.bytes);
  for (std::size_t k = 0; k < want.size(); ++k)
    if (is_scalar(k)) {
      if (src[k]) state_file::copy_values(want[k].destination, *src[k]);
      else std::memcpy(want[k].destination, want[k].older.data(), want[k].rec.bytes);
    }
  try {
    validate(where);
  } catch (...) {
    const std::byte* from = saved.data();
    for (std::size_t k = 0; k < want.size(); ++k)
      if (is_scalar(k)) {
        std::memcpy(want[k].destination, from, want[k].rec.bytes);
        from += want[k].rec.bytes;
      }
    throw;
  }
  // Nothing below throws.
  for (std::size_t k = 0; k < want.size(); ++k)
    if (src[k] && !is_scalar(k)) state_file::copy_values(want[k].destination, *src[k]);
}

// The optimizer's validate_state(), its message put in the file's context.
template <class Optimizer>
void validate_loaded(const Optimizer& opt, const std::string& where) {
  try {
    opt.validate_state();
  } catch (const error& e) {
    std::string_view what = e.what();
    if (what.starts_with("ctg: ")) what.remove_prefix(5);
    throw error(where + std::string(what));
  }
}

// The records a checkpoint of the store (and the optimizers) holds; the
// store's seed and step count are read from (and loaded into) `key`.
template <class Store, class... Optimizer>
record_list checkpoint_records(Store& store, store_key<Store>& key, Optimizer&... opt) {
  (check_optimizer<std::remove_const_t<Optimizer>, Store>(), ...);  // (const when saving: records to read)
  record_list recs;
  param_records(recs, store);
  key.add_to(recs);
  (opt.state_records(recs), ...);
  return recs;
}

// An optimizer made for another store: its state is that store's (an
// error before anything is read or written).
template <class Optimizer, class Store>
void check_optimizer_of(const Optimizer& opt, const Store& store) {
  if constexpr (requires { opt.check_store(store); }) opt.check_store(store);
}

// save and load, with no optimizer or one.
template <class Store, class... Optimizer>
void save_checkpoint(const std::filesystem::path& path, Store& store, const Optimizer&... opt) {
  (check_optimizer_of(opt, store), ...);
  check_between_sets(store, file_where(path));
  auto key = store_key<Store>::of(store);
  const record_list recs = checkpoint_records(store, key, opt...);
  std::vector<state_file::record> out;
  std::uint32_t ver = 2;  // (the store records: since 2)
  for (const wanted_record& w : recs.records) {
    out.push_back(w.rec);
    ver = std::max(ver, w.since);
  }
  state_file::write(path, out, ver);
}

template <class Store, class... Optimizer>
void load_checkpoint(const std::filesystem::path& path, Store& store, Optimizer&... opt) {
  (check_optimizer_of(opt, store), ...);
  check_between_sets(store, file_where(path));
  auto load = [&] {
    auto key = store_key<Store>::of(store);
    record_list recs = checkpoint_records(store, key, opt...);
    load_records(path, recs.records, sizeof...(Optimizer) > 0,
                 [&]([[maybe_unused]] const std::string& where) { (validate_loaded(opt, where), ...); });
    recs.finish_load();
    key.commit(store);
  };
  // A weight held whole in this rank's rows only (an fp8 weight of
  // dist::data_parallel, on real ranks) is written whole: whole from here
  // on (as upload makes it), or, when the load fails, as before.
  if constexpr (requires { store.rows_only_marks(); }) {
    const auto marks = store.rows_only_marks();
    store.set_rows_only_marks({});
    try {
      load();
    } catch (...) {
      store.set_rows_only_marks(marks);
      throw;
    }
  } else {
    load();
  }
  drop_replaced_grads(store);
}

// A data-parallel replica's checkpoint is every rank's (dist::save /
// dist::load): io's would write one rank's run count for the global one,
// and load the same dropout keys on every rank, next to optimizer shards
// it cannot reach.
template <class Store>
void check_not_a_replica(const Store& s, const std::filesystem::path& path, const char* what) {
  if constexpr (requires { s.in_replica_group(); })
    if (s.in_replica_group())
      throw error(file_where(path) + "io::" + what + ": this store runs as a data-parallel replica " +
                  "(dist::data_parallel): use dist::" + what + "(path, dp, opt) on every rank" +
                  (std::string(what) == "save"
                       ? "; nothing was written"
                       : " (a file saved with the optimizer), or load parameters before the data_parallel is "
                         "made (or with io::load_safetensors); nothing was loaded"));
}
}  // namespace detail

namespace io {

// The store's state: every stored leaf, the dropout seed and the step count.
template <step_store Store>
void save(const std::filesystem::path& path, Store& store) {
  detail::check_not_a_replica(store, path, "save");
  detail::save_checkpoint(path, store);
}

// The store's state and the optimizer's (for AdamW: masters, moments, step count, configuration).
template <step_store Store, class Optimizer>
void save(const std::filesystem::path& path, Store& store, const Optimizer& opt) {
  detail::check_not_a_replica(store, path, "save");
  detail::save_checkpoint(path, store, opt);
}

// The store's state; the file's optimizer records, if any, are ignored.
template <step_store Store>
void load(const std::filesystem::path& path, Store& store) {
  detail::check_not_a_replica(store, path, "load");
  detail::load_checkpoint(path, store);
}

// The store's state and the optimizer's, as save(path, store, opt) wrote them.
template <step_store Store, class Optimizer>
void load(const std::filesystem::path& path, Store& store, Optimizer& opt) {
  detail::check_not_a_replica(store, path, "load");
  detail::load_checkpoint(path, store, opt);
}

}  // namespace io
}  // namespace ctg

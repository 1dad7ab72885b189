#pragma once
// Checkpoints of a data-parallel run, in the one state file format
// (io/checkpoint.hpp) with global shapes: a file saved at W ranks is the
// file one process with optim::adamw saves, so it loads at any number of
// ranks, emulated or not, and into a single-process store.
//
//   ctg::dist::save("ckpt.ctg", dp, opt);   // every rank calls it; rank 0 writes
//   ctg::dist::load("ckpt.ctg", dp, opt);   // every rank calls it; each takes its shards
//
// save gathers every rank's shards of the optimizer state (one all-gather
// per leaf and kind of state); rank 0 writes the file. load reads the file
// on every rank into a scratch store first, so a file one rank cannot read
// is a ctg::error on every rank and changes nothing anywhere, as is a load
// while a step is under way (some of its runs done: their gradients would
// be summed with runs on the loaded parameters). Dropout masks are keyed by
// the global run: after a load at W' ranks, rank r's micro-batch m of the
// next step is keyed runs + m * W' + r, `runs` the file's global run count
// (its store's; data_parallel::resume_at).
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <ctg/dist/sharded_adamw.hpp>
#include <ctg/io/checkpoint.hpp>

namespace ctg::dist {

namespace detail {
// Every rank learns whether every rank succeeded (`failure` empty); throws
// on every rank if one did not.
inline void agree_on(communicator& comm, const std::string& failure, const char* what) {
  run_report mine;
  mine.failed = !failure.empty();
  if (mine.failed) std::strncpy(mine.message, failure.c_str(), sizeof(mine.message) - 1);
  std::vector<run_report> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const run_report>(&mine, 1), std::span(all));
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r].failed) {
      if (mine.failed) throw error(failure);
      throw error(std::string("ctg: data parallel: ") + what + ": rank " + std::to_string(r) + " failed (" + all[r].message +
                  "); nothing was " + (std::string(what) == "save" ? "written" : "loaded") + " on any rank");
    }
}
}  // namespace detail

template <step_store Store>
void save(const std::filesystem::path& path, data_parallel<Store>& dp, sharded_adamw<Store>& opt) {
  opt.check_data_parallel(dp);
  opt.gather_whole_parameters();
  optim::adamw<Store> whole(dp.store(), opt.config());
  opt.gather_into(whole);
  std::string failure;
  if (dp.comm().rank() == 0) {  // (its run count is the global one: step * W)
    try {
      ctg::detail::save_checkpoint(path, dp.store(), whole);  // (io::save refuses a replica's store)
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  dp.reshard();  // (fsdp: the stacks' parameters back in shards only)
  detail::agree_on(dp.comm(), failure, "save");
}

template <step_store Store>
void load(const std::filesystem::path& path, data_parallel<Store>& dp, sharded_adamw<Store>& opt) {
  opt.check_data_parallel(dp);
  using step_type = typename Store::step_type;
  Store scratch;
  optim::adamw<Store> whole(scratch, opt.config());
  // A version-1 file keeps no seed or step count: the store's stay as they are.
  scratch.seed(dp.store().seed());
  scratch.set_steps_run(dp.store().steps_run() - static_cast<std::uint64_t>(dp.first_shard()));  // (the global runs)
  std::string failure;
  if (dp.runs_done() != 0) {
    failure = "ctg: data parallel: load: " + std::to_string(dp.runs_done()) +
              " runs of a data-parallel step are done on this rank; finish the step (and apply it) or start a "
              "new data_parallel before loading";
  } else {
    try {
      io::load(path, scratch, whole);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  detail::agree_on(dp.comm(), failure, "load");
  // Every rank read the file: nothing below throws.
  dp.store().hold_stacked_params();  // (fsdp: whole while loading, then each rank's rows kept)
  detail::for_each_stored_leaf<step_type>([&]<class L>() {
    std::vector<typename L::dtype> host(L::dims::static_numel);
    scratch.download(L{}, std::span(host));
    dp.store().upload(L{}, std::span<const typename L::dtype>(host));
  });
  dp.reshard();
  dp.store().seed(scratch.seed());
  dp.resume_at(scratch.steps_run());
  dp.forget_fp8_payloads();
  dp.store().drop_grads();  // (an unapplied gradient was taken at the values replaced)
  opt.take_from(whole);
}

// (A data_parallel that does nothing, detail::null_replicated: nothing to save or load.)
template <step_store Store>
  requires detail::null_replicated<Store>
void save(const std::filesystem::path&, data_parallel<Store>&, sharded_adamw<Store>&) {}
template <step_store Store>
  requires detail::null_replicated<Store>
void load(const std::filesystem::path&, data_parallel<Store>&, sharded_adamw<Store>&) {}

}  // namespace ctg::dist

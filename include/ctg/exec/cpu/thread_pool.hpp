#pragma once
// The CPU backend's threads: a small pool that runs the tasks of one loop
// (a GEMM's row blocks, a fused group's rows) on its workers and the calling
// thread, and returns when all are done.
//
//   ctg::cpu::thread_pool pool(2);                       // the caller + 1 worker
//   pool.run(tasks, [](void* ctx, std::size_t task, unsigned worker) { ... }, &ctx);
//
// A task is a fixed piece of the work, cut the same way whatever the number
// of threads, so which thread runs it never changes a result; `worker`
// (0 = the caller, < size()) only picks per-thread scratch. Not reentrant:
// one run at a time (the CPU runners run one group at a time). Workers spin
// briefly after a run (groups follow each other within microseconds), then
// sleep on a futex (std::atomic::wait). A task that throws (a GEMM's
// scratch that cannot grow: std::bad_alloc) ends the run: the tasks not yet
// started are skipped, the run waits for those running, then rethrows the
// first exception on the caller, and the pool is ready for the next run.
#include <atomic>
#include <cfenv>
#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ctg/core/error.hpp>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define CTG_POOL_PAUSE() __builtin_ia32_pause()
#define CTG_POOL_MXCSR 1
#else
#define CTG_POOL_PAUSE() ((void)0)
#define CTG_POOL_MXCSR 0
#endif

namespace ctg::cpu {

// A thread's floating-point mode: rounding, flush-to-zero and
// denormals-are-zero. A run's workers take on the caller's before its
// tasks: a thread keeps the mode it started with, so a mode the caller set
// after the pool was made (another library's flush-to-zero, say) flushed the
// caller's rows only, and the bits followed the thread count.
class float_mode {
 public:
  static float_mode of_this_thread() {
    float_mode m;
#if CTG_POOL_MXCSR
    m.control_ = __builtin_ia32_stmxcsr() & ~status_flags;
#else
    std::fegetenv(&m.env_);
#endif
    return m;
  }
  void set_on_this_thread() const {
#if CTG_POOL_MXCSR
    if ((__builtin_ia32_stmxcsr() & ~status_flags) != control_) __builtin_ia32_ldmxcsr(control_);
#else
    std::fesetenv(&env_);
#endif
  }

 private:
#if CTG_POOL_MXCSR
  static constexpr unsigned status_flags = 0x3F;  // (MXCSR's sticky exception flags: not a mode)
  unsigned control_ = 0;
#else
  std::fenv_t env_{};
#endif
};

// The hardware's thread count (1 when it cannot tell).
inline unsigned hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? n : 1;
}

class thread_pool {
 public:
  using task_fn = void (*)(void* ctx, std::size_t task, unsigned worker);

  // Throws ctg::error when the system gives fewer threads, the workers it
  // gave stopped and joined (left running, their std::thread objects would
  // end the program).
  explicit thread_pool(unsigned threads) : size_(threads ? threads : 1) {
    try {
      workers_.reserve(size_ - 1);
      for (unsigned w = 1; w < size_; ++w) workers_.emplace_back([this, w] { work_loop(w); });
    } catch (const std::exception& e) {
      stop_workers();
      throw error("ctg: cpu::device: cannot start " + std::to_string(size_ - 1) + " worker threads (" +
                  std::to_string(workers_.size()) + " started: " + e.what() + "); ask for fewer threads");
    }
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() { stop_workers(); }

  // Threads that run tasks: the caller and size() - 1 workers.
  unsigned size() const { return size_; }
  // Runs offered to the workers so far (those of more than one task).
  std::size_t shared_runs() const { return shared_runs_; }

  // fn(ctx, t, worker) for every t in [0, tasks); returns when all are done.
  // The caller takes tasks too, and every task a worker has not claimed, so
  // a worker the OS has not scheduled (a machine shared with other work)
  // delays nothing: the caller waits only for tasks already running.
  void run(std::size_t tasks, task_fn fn, void* ctx) {
    if (tasks == 0) return;
    if (size_ == 1 || tasks == 1) {
      for (std::size_t t = 0; t < tasks; ++t) fn(ctx, t, 0);
      return;
    }
    ++shared_runs_;
    mode_ = float_mode::of_this_thread();
    fn_ = fn;
    ctx_ = ctx;
    tasks_ = tasks;
    next_.store(0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    open_.store(true, std::memory_order_release);
    generation_.fetch_add(1);  // (seq_cst: a worker about to sleep sees it, or we see it sleeping)
    if (sleeping_.load() > 0) generation_.notify_all();
    take_tasks(0);
    open_.store(false);  // every task is claimed: late workers stay out
    wait_until([&] { return done_.load(std::memory_order_acquire) == tasks_; });
    wait_until([&] { return inside_.load() == 0; });  // (then no worker reads this job any more)
    if (failed_.load(std::memory_order_relaxed)) std::rethrow_exception(std::exchange(failure_, nullptr));
  }

  // The same with any callable f(task, worker) (through run_task<F>).
  template <class F>
  void for_each(std::size_t tasks, F& f) {
    run(tasks, &run_task<F>, &f);
  }
  // f(task, worker) as a task_fn. Not inlined: a runner's body is compiled
  // once, here, whether its tasks run on the pool or in order on the caller
  // (cpu::run_tasks); inlined at both, -O3 compiled every body twice.
  template <class F>
  [[gnu::noinline]] static void run_task(void* f, std::size_t task, unsigned worker) {
    (*static_cast<F*>(f))(task, worker);
  }

 private:
  static constexpr unsigned spin_limit = 4000;  // ~10-40 us of pause instructions

  void stop_workers() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  template <class Done>
  static void wait_until(Done done) {
    for (unsigned spin = 0; !done(); ++spin) {
      if (spin < spin_limit) CTG_POOL_PAUSE();
      else std::this_thread::yield();
    }
  }

  // Every task claimed counts as done, run or (after a task threw) skipped,
  // so the caller's wait ends; an exception never leaves a worker's thread
  // (std::terminate) nor the caller's before the workers are out of the job
  // (they would run tasks on a context the unwinding destroyed).
  void take_tasks(unsigned worker) {
    for (std::size_t t; (t = next_.fetch_add(1, std::memory_order_relaxed)) < tasks_;) {
      if (!failed_.load(std::memory_order_relaxed)) {
        try {
          fn_(ctx_, t, worker);
        } catch (...) {
          if (!failed_.exchange(true)) failure_ = std::current_exception();  // (seen by the caller through done_)
        }
      }
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  void work_loop(unsigned worker) {
    unsigned seen = 0;
    for (;;) {
      unsigned g = generation_.load(std::memory_order_acquire);
      for (unsigned spin = 0; g == seen && spin < spin_limit; ++spin) {
        CTG_POOL_PAUSE();
        g = generation_.load(std::memory_order_acquire);
      }
      if (g == seen) {
        sleeping_.fetch_add(1);
        generation_.wait(seen);
        sleeping_.fetch_sub(1);
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop_.load()) return;
      // Join the job that is open now, if any (the caller does not rewrite
      // a job while a worker is inside).
      inside_.fetch_add(1);
      if (open_.load()) {
        mode_.set_on_this_thread();
        take_tasks(worker);
      }
      inside_.fetch_sub(1);
    }
  }

  unsigned size_;
  std::vector<std::thread> workers_;
  std::atomic<unsigned> generation_{0}, sleeping_{0}, inside_{0};
  std::atomic<std::size_t> next_{0}, done_{0};
  std::atomic<bool> open_{false}, stop_{false}, failed_{false};
  std::exception_ptr failure_;  // the first exception of the run, when failed_
  task_fn fn_ = nullptr;
  void* ctx_ = nullptr;
  float_mode mode_;
  std::size_t tasks_ = 0;
  std::size_t shared_runs_ = 0;
};

// f(task, worker) for every task in [0, tasks): on pool when there is one,
// else in order on the caller (worker 0). Runners split their work into
// tasks that give the same bits in any order, so both give the same result.
template <class F>
void run_tasks(thread_pool* pool, std::size_t tasks, F& f) {
  if (pool) {
    pool->for_each(tasks, f);
  } else {
    for (std::size_t t = 0; t < tasks; ++t) thread_pool::run_task<F>(&f, t, 0);
  }
}

// How a CPU store runs its groups: how many threads, and their pool (made
// on first use, shared with the stores a store drives: a stack's block, a
// shared store's evaluation steps). One thread: no pool, no workers.
class threads {
 public:
  threads() : threads(hardware_threads()) {}
  explicit threads(unsigned n) : count_(n ? n : 1) {}

  unsigned count() const { return count_; }
  void set(unsigned n) {
    n = n ? n : 1;
    if (n != count_) pool_.reset();
    count_ = n;
  }
  // The pool (null with one thread).
  thread_pool* pool() {
    if (count_ <= 1) return nullptr;
    if (!pool_) pool_ = std::make_shared<thread_pool>(count_);
    return pool_.get();
  }
  // Use another's count and pool.
  void follow(threads& parent) {
    if (parent.count_ == count_ && (count_ <= 1 || pool_ == parent.pool_)) return;
    parent.pool();  // (first: a pool that fails to start changes nothing here)
    count_ = parent.count_;
    pool_ = parent.pool_;
  }

 private:
  unsigned count_;
  std::shared_ptr<thread_pool> pool_;
};

}  // namespace ctg::cpu

#undef CTG_POOL_PAUSE
#undef CTG_POOL_MXCSR

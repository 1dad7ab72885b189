// Threads change no bit: one training step (forward, backward, clipping,
// AdamW) of the tiny transformer, then a second, on 1, 2 and 3 threads
// (cpu::device{n}) gives the same loss, parameters, gradients and optimizer
// state. The model is the benchmark's (bench/tiny_lm_step.cpp), big enough
// that every kind of runner splits its work: GEMMs (512 x 172 x 64), batched
// attention products (32 batches), fused loops and row reductions over
// 32K elements, and the reductions over the batch (dim 64 columns). Also the
// pool itself: every task runs once, on any number of threads.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

#include "same_state.hpp"

namespace {
struct config {
  static constexpr ctg::dim_t vocab = 96, max_seq = 64, dim = 64, heads = 4, head_dim = 16, hidden = 172;
  static constexpr std::size_t layers = 2;
};
constexpr std::size_t batch = 8, seq = 64;
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;

template <class Policy>
void same_bits_on_any_thread_count() {
  using M = ctg::nn::transformer<config, Policy>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  std::vector<ctg::i32> ids(batch * seq), targets(batch * seq), pos(seq);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<ctg::i32>((i * 7 + 3) % config::vocab);
    targets[i] = static_cast<ctg::i32>((i * 11 + 10) % config::vocab);
  }
  for (std::size_t t = 0; t < seq; ++t) pos[t] = static_cast<ctg::i32>(t);

  auto train = [&](unsigned threads, auto& store, std::vector<float>& losses) {
    CHECK(store.workspace().threads.count() == threads);
    ctg::nn::init_params(store, 7);
    ctg::optim::adamw opt(store, {.lr = 1e-2f, .weight_decay = 0.1f, .max_grad_norm = 1.0f});
    for (int s = 0; s < 2; ++s) {
      losses.push_back(step(store, ctg::feed<Ids>(ids, batch, seq), ctg::feed<Pos>(pos, seq),
                            ctg::feed<Tg>(targets, batch, seq)));
      opt.step(store);
    }
    // The gradients of the last step, before the update, for check_same_state.
    step(store, ctg::feed<Ids>(ids, batch, seq), ctg::feed<Pos>(pos, seq), ctg::feed<Tg>(targets, batch, seq));
  };
  auto one = ctg::make_store(ctg::cpu::device{1}, step);
  std::vector<float> l1;
  train(1, one, l1);
  for (unsigned n : {2u, 3u}) {
    INFO(n << " threads");
    auto many = ctg::make_store(ctg::cpu::device{n}, step);
    std::vector<float> ln;
    train(n, many, ln);
    REQUIRE(many.workspace().pool() != nullptr);
    CHECK(many.workspace().pool()->shared_runs() > 100);  // (the step did split its work)
    CHECK(std::memcmp(l1.data(), ln.data(), l1.size() * sizeof(float)) == 0);
    same_state::check_same_state(one, many);
  }
}
}  // namespace

TEST_CASE("threads: a training step gives the same bits on 1, 2 and 3 threads, f32") {
  same_bits_on_any_thread_count<ctg::precision::full<ctg::f32>>();
}

TEST_CASE("threads: a training step gives the same bits on 1, 2 and 3 threads, autocast<bf16>") {
  same_bits_on_any_thread_count<ctg::precision::autocast<ctg::bf16>>();
}

#if defined(__SSE2__)
TEST_CASE("thread_pool: workers run with the caller's flush-to-zero mode, set after the pool was made") {
  // (A worker kept the mode it started with: only the caller's tasks flushed, so the bits followed the thread count.)
  ctg::cpu::thread_pool pool(3);
  std::vector<float> products(64);
  std::vector<unsigned> ran_on(64);
  volatile float tiny = 1e-20f;  // (1e-40: a subnormal, or 0 when flushed)
  std::atomic<bool> a_worker_ran{false};
  auto multiply = [&](std::size_t t, unsigned worker) {
    if (worker != 0) a_worker_ran = true;
    // The caller's tasks wait (up to 10 s) until a worker has taken one, so workers run some.
    for (int spin = 0; worker == 0 && !a_worker_ran && spin < 10'000'000; ++spin) std::this_thread::yield();
    products[t] = tiny * tiny;
    ran_on[t] = worker;
  };
  auto workers_took_some = [&] { return std::any_of(ran_on.begin(), ran_on.end(), [](unsigned w) { return w != 0; }); };
  pool.for_each(products.size(), multiply);
  for (float p : products) CHECK(p != 0.0f);
  const unsigned before = _mm_getcsr();
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  a_worker_ran = false;
  pool.for_each(products.size(), multiply);
  _mm_setcsr(before);
  REQUIRE(workers_took_some());
  for (std::size_t t = 0; t < products.size(); ++t) {
    INFO("task " << t << " on thread " << ran_on[t]);
    CHECK(products[t] == 0.0f);
  }
  a_worker_ran = false;
  pool.for_each(products.size(), multiply);  // (and off again)
  REQUIRE(workers_took_some());
  for (float p : products) CHECK(p != 0.0f);
}
#endif

TEST_CASE("thread_pool: a system that gives fewer threads than asked is a ctg::error, not the end of the program") {
  // (The workers already started were left joinable when the next one failed: std::terminate.)
  // In a child process whose address space fits about 250 thread stacks of 8 MiB.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    rlimit limit{std::size_t{2} << 30, std::size_t{2} << 30};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(5);
    try {
      ctg::cpu::thread_pool pool(4000);
      _exit(2);  // (the system gave them all: nothing tested)
    } catch (const ctg::error& e) {
      _exit(std::string(e.what()).find("ctg: cpu::device: cannot start 3999 worker threads") != std::string::npos ? 0 : 3);
    } catch (...) {
      _exit(4);
    }
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));  // (not killed by std::terminate's abort)
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("threads: the default device uses the hardware's threads") {
  CHECK(ctg::cpu::device{}.thread_count() == ctg::cpu::hardware_threads());
  CHECK(ctg::cpu::device{3}.thread_count() == 3u);
}

TEST_CASE("thread_pool: every task runs exactly once, on any number of threads, many runs in a row") {
  for (unsigned threads : {1u, 2u, 3u, 5u}) {
    ctg::cpu::thread_pool pool(threads);
    CHECK(pool.size() == threads);
    for (std::size_t tasks : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(7), std::size_t(1000)}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> hits(tasks);
        std::atomic<bool> bad_worker{false};
        auto f = [&](std::size_t t, unsigned worker) {
          hits[t].fetch_add(1);
          if (worker >= threads) bad_worker = true;
        };
        pool.for_each(tasks, f);
        int wrong = 0;
        for (auto& h : hits) wrong += h.load() != 1;
        INFO(threads << " threads, " << tasks << " tasks");
        CHECK(wrong == 0);
        CHECK(!bad_worker);
      }
    }
  }
}

TEST_CASE("thread_pool: a task that throws ends the run with its exception on the caller; the pool runs on") {
  // (A GEMM's scratch that cannot grow throws std::bad_alloc in a task: it
  // ended the program from a worker, and from the caller's task it unwound
  // the run while workers still ran tasks on its destroyed context.)
  for (unsigned threads : {2u, 3u, 5u}) {
    ctg::cpu::thread_pool pool(threads);
    for (std::size_t thrower : {std::size_t(0), std::size_t(3), std::size_t(199)}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<int> context(200, 0);  // destroyed by the unwinding when a run leaves early
        auto f = [&](std::size_t t, unsigned) {
          if (t == thrower) throw std::runtime_error("task " + std::to_string(t));
          std::this_thread::sleep_for(std::chrono::microseconds(20));
          context[t] += 1;
        };
        INFO(threads << " threads, task " << thrower << " throws");
        CHECK_THROWS_WITH_AS(pool.for_each(200, f), ("task " + std::to_string(thrower)).c_str(), std::runtime_error);
      }
    }
    // Every task throws (each worker's and the caller's): one exception comes out.
    auto all = [](std::size_t, unsigned) { throw std::bad_alloc(); };
    CHECK_THROWS_AS(pool.for_each(64, all), std::bad_alloc);
    // The pool is ready for the next run: every task once.
    std::vector<std::atomic<int>> hits(1000);
    auto count = [&](std::size_t t, unsigned) { hits[t].fetch_add(1); };
    pool.for_each(hits.size(), count);
    int wrong = 0;
    for (auto& h : hits) wrong += h.load() != 1;
    CHECK(wrong == 0);
  }
}

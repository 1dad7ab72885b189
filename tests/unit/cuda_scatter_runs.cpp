// The CUDA scatter_add (exec/cuda/scatter_runs.hpp: ids sorted stably with
// their positions, then each run of equal ids summed by a thread a column)
// run here on the CPU for every (sorted position, column), std::stable_sort
// standing in for cub's radix sort, against the CPU backend (its runner, and
// a store's gradient of an embedding): the same bits, with many repeated
// ids and rows never used, bf16 rows into an f32 table (autocast's
// embedding) and f64.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cpu/index_ops.hpp>
#include <ctg/exec/cuda/scatter_runs.hpp>

namespace {
using ctg::dim_t;
using ctg::i32;

constexpr dim_t rows = 50, row_len = 37, n = 3000;  // 3000 ids over 50 rows (rows 45..49 never used)

std::vector<i32> some_ids() {
  std::mt19937 rng(5);
  std::uniform_int_distribution<i32> id(0, 44);
  std::vector<i32> ids(n);
  for (auto& v : ids) v = id(rng);
  ids[17] = 0;  // (a run at the first row)
  return ids;
}

// The table's gradient as the GPU computes it: positions sorted stably by id,
// then scatter_add_run at every (s, k).
template <class TO, class TG>
std::vector<TO> by_runs(const std::vector<i32>& ids, const std::vector<TG>& g) {
  std::vector<i32> positions(ids.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::stable_sort(positions.begin(), positions.end(), [&](i32 a, i32 b) { return ids[a] < ids[b]; });
  std::vector<i32> sorted(ids.size());
  for (std::size_t s = 0; s < ids.size(); ++s) sorted[s] = ids[static_cast<std::size_t>(positions[s])];
  std::vector<TO> out(static_cast<std::size_t>(rows * row_len), TO(0));  // (zeroed, as the runner does)
  for (dim_t s = 0; s < n; ++s)
    for (dim_t k = 0; k < row_len; ++k)
      ctg::cuda::scatter_add_run(sorted.data(), positions.data(), n, s, k, g.data(), row_len, out.data());
  return out;
}

template <class T>
std::size_t differing(const std::vector<T>& a, const std::vector<T>& b) {
  std::size_t d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return d;
}
}  // namespace

TEST_CASE("scatter_add by sorted runs of ids gives the CPU store's embedding gradient bit for bit") {
  const std::vector<i32> ids = some_ids();
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  ctg::cpu::device dev;
  using Ids = ctg::input<"ids", i32, ctg::dyn>;

  SUBCASE("bf16 rows into an f32 table (autocast's embedding), against the CPU backend's runner") {
    // (Through a store the table's gradient would come back rounded to bf16,
    // the dtype of the cast the table is gathered through: so the runner.)
    // (Magnitudes 2^-12 to 2^12: f32 sums of such bf16 values round, so their order shows.)
    std::uniform_int_distribution<int> e(-12, 12);
    std::vector<ctg::bf16> r(static_cast<std::size_t>(n * row_len));
    for (auto& v : r) v = ctg::bf16(static_cast<float>(std::ldexp(u(rng), e(rng))));
    std::vector<i32> ids_in = ids;
    std::vector<float> cpu(static_cast<std::size_t>(rows * row_len), 1.0f);  // (the runner zeroes it)
    std::byte* bufs[3] = {reinterpret_cast<std::byte*>(r.data()), reinterpret_cast<std::byte*>(ids_in.data()),
                          reinterpret_cast<std::byte*>(cpu.data())};
    const ctg::rt_shape shapes[3] = {{{n, row_len}, 2}, {{n}, 1}, {{rows, row_len}, 2}};
    ctg::group_call call;
    call.root = 2;
    call.child[0] = 0;
    call.child[1] = 1;
    ctg::cpu::workspace ws;
    ctg::cpu::run_scatter_add<float, ctg::bf16>(call, ctg::bindings_view{bufs, shapes, {}}, ws, nullptr);
    const std::vector<float> gpu = by_runs<float>(ids, r);
    CHECK(differing(gpu, cpu) == 0);
    // The order matters here: the runs summed backwards give other bits.
    std::vector<ctg::bf16> reversed_r(r.size());
    std::vector<i32> reversed_ids(ids.rbegin(), ids.rend());
    for (dim_t i = 0; i < n; ++i)
      std::copy_n(r.begin() + (n - 1 - i) * row_len, row_len, reversed_r.begin() + i * row_len);
    CHECK(differing(by_runs<float>(reversed_ids, reversed_r), cpu) > 0);
    // Rows no id names stay zero.
    for (dim_t k = 45 * row_len; k < rows * row_len; ++k) CHECK(gpu[static_cast<std::size_t>(k)] == 0.0f);
  }
  SUBCASE("f64, against the CPU store's gradient of an embedding") {
    using E = ctg::param<"embed", ctg::f64, rows, row_len>;
    using R = ctg::input<"r", ctg::f64, ctg::dyn, row_len>;
    auto step = ctg::value_and_grad(ctg::sum(ctg::gather(E{}, Ids{}) * R{}), ctg::wrt<E>);
    auto store = ctg::make_store(dev, step);
    std::vector<double> r(static_cast<std::size_t>(n * row_len));
    for (auto& v : r) v = u(rng);
    step(store, ctg::feed<Ids>(ids, n), ctg::feed<R>(r, n));
    const auto grad = store.grad<E>();
    CHECK(differing(by_runs<double>(ids, r), std::vector<double>(grad.begin(), grad.end())) == 0);
  }
}

TEST_CASE("the sort looks at as many low bits of the ids as the table's rows need") {
  CHECK(ctg::cuda::id_bits(1) == 1);
  CHECK(ctg::cuda::id_bits(2) == 1);
  CHECK(ctg::cuda::id_bits(3) == 2);
  CHECK(ctg::cuda::id_bits(50304) == 16);  // (GPT-2's vocabulary: ids below 2^16)
  CHECK(ctg::cuda::id_bits(65536) == 16);
  CHECK(ctg::cuda::id_bits(65537) == 17);
  CHECK(ctg::cuda::id_bits(dim_t{1} << 40) == 31);
  // Every id below `rows` fits in the bits sorted.
  for (dim_t r : {dim_t{1}, dim_t{7}, dim_t{64}, dim_t{1000}, dim_t{50304}})
    CHECK(((r - 1) >> ctg::cuda::id_bits(r)) == 0);
}

TEST_CASE("the sort's buffers lie apart, each 256-byte aligned") {
  const ctg::cuda::scatter_sort_layout at(1001, 3000);
  const std::size_t starts[] = {at.positions, at.sorted_ids, at.sorted_positions, at.temp};
  for (std::size_t s : starts) CHECK(s % 256 == 0);
  CHECK(at.sorted_ids >= at.positions + 1001 * 4);
  CHECK(at.sorted_positions >= at.sorted_ids + 1001 * 4);
  CHECK(at.temp >= at.sorted_positions + 1001 * 4);
  CHECK(at.bytes >= at.temp + 3000);
}

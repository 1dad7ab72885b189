// cpu::gemm: accuracy against a double-precision reference (error bound from K
// and the unit roundoff), bit-exactness against the documented f32 FMA chain
// for every kernel set this CPU has (and against the vdpbf16ps pair chain for
// bf16 x bf16 where the CPU has AVX512-BF16), and independence from
// alignment, from the workspace's history and from the number of threads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <string>
#include <vector>

#include <ctg/core/dtypes.hpp>
#include <ctg/exec/cpu/gemm.hpp>

namespace {

using ctg::dim_t;
using ctg::detail::gemm_isa;

struct mnk {
  dim_t m, n, k;
};

std::string str(mnk s) { return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k); }

// Odd sizes around the kernels' MR (4, 6, 8) and NR (8, 16, 32) and the model's shapes,
// and K past gemm_long_k (2048), in blocks of gemm_k_block (512) steps: 4 blocks + 52, 5 + 40.
const std::vector<mnk> shapes = {
    {1, 1, 1},    {1, 172, 64}, {3, 3, 3},    {3, 17, 0},   {17, 33, 17},  {8, 16, 513}, {33, 65, 3},
    {65, 172, 64}, {64, 64, 16}, {64, 16, 64}, {7, 96, 172}, {513, 33, 65}, {17, 1, 513}, {65, 31, 1},
    {9, 41, 2100}, {19, 48, 2600},
};

template <class T>
std::vector<T> random_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> v(n);
  for (auto& e : v) e = ctg::from_float<T>(static_cast<float>(u(rng)));
  return v;
}

template <class T>
double as_double(T v) {
  return static_cast<double>(ctg::load_as<T>(v));
}

template <class T>
std::uint64_t bits(T v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}

template <class T>
double unit_roundoff() {
  return static_cast<double>(ctg::dtype_traits<T>::epsilon) / 2;
}

// Every kernel set this CPU has.
std::vector<gemm_isa> available_isas() {
  std::vector<gemm_isa> isas;
  for (gemm_isa isa : {gemm_isa::portable, gemm_isa::avx2, gemm_isa::avx512, gemm_isa::avx512_bf16})
    if (ctg::detail::gemm_isa_available(isa)) isas.push_back(isa);
  return isas;
}

// The documented operations, written out: one f32 FMA chain per output.
template <class TA, class TB, class TC>
std::vector<TC> fma_chain(mnk s, const std::vector<TA>& a, const std::vector<TB>& b) {
  std::vector<TC> c(static_cast<std::size_t>(s.m * s.n));
  for (dim_t i = 0; i < s.m; ++i)
    for (dim_t j = 0; j < s.n; ++j) {
      float acc = 0.0f;
      for (dim_t k = 0; k < s.k; ++k)
        acc = std::fma(ctg::load_as<TA>(a[i * s.k + k]), ctg::load_as<TB>(b[k * s.n + j]), acc);
      c[i * s.n + j] = ctg::store_as<TC>(acc);
    }
  return c;
}

// |C - AB| <= gamma_K * sum_k |a||b| (accumulation, u of the compute type)
//           + u_TC * (|AB| + that)      (the one rounding to TC).
template <class TA, class TB, class TC>
void check_accuracy(mnk s) {
  using C = ctg::compute_t<TC>;
  const auto a = random_values<TA>(static_cast<std::size_t>(s.m * s.k), 1);
  const auto b = random_values<TB>(static_cast<std::size_t>(s.k * s.n), 2);
  std::vector<TC> c(static_cast<std::size_t>(s.m * s.n), ctg::from_float<TC>(NAN));
  ctg::cpu::gemm_workspace ws;
  ctg::cpu::gemm(s.m, s.n, s.k, a.data(), b.data(), c.data(), ws);
  const double u = unit_roundoff<C>(), gamma = s.k * u / (1 - s.k * u), u_out = unit_roundoff<TC>();
  for (dim_t i = 0; i < s.m; ++i)
    for (dim_t j = 0; j < s.n; ++j) {
      double ref = 0, mag = 0;
      for (dim_t k = 0; k < s.k; ++k) {
        const double p = as_double(a[i * s.k + k]) * as_double(b[k * s.n + j]);
        ref += p;
        mag += std::abs(p);
      }
      const double got = as_double(c[i * s.n + j]), bound = gamma * mag + u_out * (std::abs(ref) + gamma * mag);
      if (!(std::abs(got - ref) <= bound)) {
        INFO(str(s), " at (", i, ",", j, "): got ", got, " want ", ref, " bound ", bound);
        CHECK(std::abs(got - ref) <= bound);
        return;
      }
    }
}

// Every kernel set of this CPU gives the FMA chain's bits.
template <class TA, class TB, class TC>
void check_bits_every_isa(mnk s) {
  const auto a = random_values<TA>(static_cast<std::size_t>(s.m * s.k), 3);
  const auto b = random_values<TB>(static_cast<std::size_t>(s.k * s.n), 4);
  const auto want = fma_chain<TA, TB, TC>(s, a, b);
  for (gemm_isa isa : {gemm_isa::portable, gemm_isa::avx2, gemm_isa::avx512}) {
    if (!ctg::detail::gemm_isa_available(isa)) continue;
    ctg::cpu::gemm_workspace ws;
    std::vector<TC> c(want.size());
    ctg::detail::gemm_with(isa, s.m, s.n, s.k, a.data(), b.data(), c.data(), ws);
    std::size_t bad = 0;
    for (std::size_t e = 0; e < c.size(); ++e) bad += bits(c[e]) != bits(want[e]);
    INFO(str(s), " isa ", static_cast<int>(isa));
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("gemm: within the accumulation bound, every dtype combination") {
  for (mnk s : shapes) {
    check_accuracy<ctg::f32, ctg::f32, ctg::f32>(s);
    check_accuracy<ctg::bf16, ctg::bf16, ctg::bf16>(s);
    check_accuracy<ctg::f16, ctg::f16, ctg::f16>(s);
    check_accuracy<ctg::bf16, ctg::f32, ctg::f32>(s);
    check_accuracy<ctg::f32, ctg::bf16, ctg::f32>(s);
    check_accuracy<ctg::bf16, ctg::f16, ctg::f32>(s);
    check_accuracy<ctg::f64, ctg::f64, ctg::f64>(s);
    check_accuracy<ctg::f32, ctg::f64, ctg::f64>(s);
  }
}

TEST_CASE("gemm: bit for bit the f32 FMA chain on every kernel set") {
  for (mnk s : shapes) {
    check_bits_every_isa<ctg::f32, ctg::f32, ctg::f32>(s);
    check_bits_every_isa<ctg::bf16, ctg::bf16, ctg::bf16>(s);
    check_bits_every_isa<ctg::f16, ctg::f16, ctg::f16>(s);
    check_bits_every_isa<ctg::bf16, ctg::f32, ctg::f32>(s);
  }
}

// Past one of each of the blocks a task's work is cut in (gemm_chunk_panels
// panels of 32 columns, gemm_row_block rows, gemm_k_block steps of k), with
// short last ones: every block still gives each output the one chain.
TEST_CASE("gemm: blocks of rows, of panels and of k give the chain's bits") {
  const mnk s{140, 560, 2100};
  REQUIRE(s.m > ctg::detail::gemm_row_block);
  REQUIRE(s.n > ctg::detail::gemm_chunk_panels * 32);
  REQUIRE(s.k > ctg::detail::gemm_long_k);
  check_bits_every_isa<ctg::f32, ctg::f32, ctg::f32>(s);
  check_bits_every_isa<ctg::bf16, ctg::bf16, ctg::bf16>(s);
}

TEST_CASE("gemm: K = 0 gives zeros") {
  for (mnk s : {mnk{3, 5, 0}, mnk{17, 33, 0}}) {
    std::vector<float> c(static_cast<std::size_t>(s.m * s.n), NAN);
    std::vector<ctg::bf16> cb(c.size(), ctg::bf16(NAN));
    ctg::cpu::gemm_workspace ws;
    ctg::cpu::gemm<ctg::f32, ctg::f32, ctg::f32>(s.m, s.n, 0, nullptr, nullptr, c.data(), ws);
    ctg::cpu::gemm<ctg::bf16, ctg::bf16, ctg::bf16>(s.m, s.n, 0, nullptr, nullptr, cb.data(), ws);
    for (std::size_t e = 0; e < c.size(); ++e) {
      CHECK(bits(c[e]) == 0u);
      CHECK(cb[e].bits == 0u);
    }
  }
}

TEST_CASE("gemm: bits do not depend on alignment or on the workspace's history") {
  const mnk s{65, 172, 64};
  const auto a = random_values<ctg::bf16>(static_cast<std::size_t>(s.m * s.k), 5);
  const auto b = random_values<ctg::bf16>(static_cast<std::size_t>(s.k * s.n), 6);
  const std::size_t nc = static_cast<std::size_t>(s.m * s.n);
  std::vector<ctg::bf16> first(nc);
  ctg::cpu::gemm_workspace ws;
  ctg::cpu::gemm(s.m, s.n, s.k, a.data(), b.data(), first.data(), ws);

  SUBCASE("operands and result at every offset") {
    for (std::size_t off = 1; off < 8; ++off) {
      std::vector<ctg::bf16> a2(off + a.size()), b2(off + b.size()), c2(off + nc);
      std::copy(a.begin(), a.end(), a2.begin() + static_cast<std::ptrdiff_t>(off));
      std::copy(b.begin(), b.end(), b2.begin() + static_cast<std::ptrdiff_t>(off));
      ctg::cpu::gemm(s.m, s.n, s.k, a2.data() + off, b2.data() + off, c2.data() + off, ws);
      std::size_t bad = 0;
      for (std::size_t e = 0; e < nc; ++e) bad += c2[off + e].bits != first[e].bits;
      INFO("offset ", off);
      CHECK(bad == 0);
    }
  }
  SUBCASE("after a bigger call on non-finite data, and with a fresh workspace") {
    const mnk big{300, 400, 200};
    std::vector<ctg::bf16> ba(static_cast<std::size_t>(big.m * big.k), ctg::bf16(NAN)),
        bb(static_cast<std::size_t>(big.k * big.n), ctg::bf16(INFINITY)), bc(static_cast<std::size_t>(big.m * big.n));
    ctg::cpu::gemm(big.m, big.n, big.k, ba.data(), bb.data(), bc.data(), ws);
    std::vector<ctg::bf16> again(nc), fresh(nc);
    ctg::cpu::gemm(s.m, s.n, s.k, a.data(), b.data(), again.data(), ws);
    ctg::cpu::gemm_workspace ws2;
    ctg::cpu::gemm(s.m, s.n, s.k, a.data(), b.data(), fresh.data(), ws2);
    std::size_t bad = 0;
    for (std::size_t e = 0; e < nc; ++e) bad += (again[e].bits != first[e].bits) + (fresh[e].bits != first[e].bits);
    CHECK(bad == 0);
  }
}

TEST_CASE("gemm: a non-finite input reaches only its own row and column") {
  // Padding rows and columns are computed but must not leak into stored outputs.
  const mnk s{9, 17, 5};
  auto a = random_values<float>(static_cast<std::size_t>(s.m * s.k), 7);
  auto b = random_values<float>(static_cast<std::size_t>(s.k * s.n), 8);
  a[8 * s.k + 2] = INFINITY;  // last row
  b[1 * s.n + 16] = NAN;      // last column
  std::vector<float> c(static_cast<std::size_t>(s.m * s.n));
  ctg::cpu::gemm_workspace ws;
  ctg::cpu::gemm(s.m, s.n, s.k, a.data(), b.data(), c.data(), ws);
  for (dim_t i = 0; i < s.m; ++i)
    for (dim_t j = 0; j < s.n; ++j) {
      INFO("(", i, ",", j, ")");
      CHECK(std::isfinite(c[i * s.n + j]) == (i != 8 && j != 16));
    }
}

// Skipped in unit.cpu_gemm's run of every case because ctest's
// unit.cpu_gemm_avx512_bf16 runs it alone (--no-skip): there it reports
// itself skipped (77) on a CPU without the instructions, so a skip is not
// counted as a pass. It runs on every CPU that has them.
TEST_CASE("gemm: bf16 x bf16 on AVX512-BF16 is bit for bit the documented pair chain (vdpbf16ps)" *
          doctest::skip()) {  // (run alone as ctest unit.cpu_gemm_avx512_bf16; see above)
  if (!ctg::detail::gemm_isa_available(gemm_isa::avx512_bf16)) {
    MESSAGE("this CPU has no AVX512-BF16: bf16 products use the f32 chain (tested above)");
    std::exit(77);
  }
  CHECK(ctg::detail::gemm_best_isa() == gemm_isa::avx512_bf16);
  auto check = [](mnk s, std::vector<ctg::bf16> a, std::vector<ctg::bf16> b) {
    std::vector<ctg::bf16> want(static_cast<std::size_t>(s.m * s.n)), got(want.size());
    std::vector<float> want32(want.size()), got32(want.size());
    ctg::detail::gemm_bf16_pairs_reference(s.m, s.n, s.k, a.data(), b.data(), want.data());
    ctg::detail::gemm_bf16_pairs_reference(s.m, s.n, s.k, a.data(), b.data(), want32.data());
    ctg::cpu::gemm_workspace ws;
    ctg::detail::gemm_with(gemm_isa::avx512_bf16, s.m, s.n, s.k, a.data(), b.data(), got.data(), ws);
    ctg::detail::gemm_with(gemm_isa::avx512_bf16, s.m, s.n, s.k, a.data(), b.data(), got32.data(), ws);
    std::size_t bad = 0;
    for (std::size_t e = 0; e < want.size(); ++e) bad += (got[e].bits != want[e].bits) + (bits(got32[e]) != bits(want32[e]));
    INFO(str(s));
    CHECK(bad == 0);
  };
  // (Past gemm_long_k pairs, 4096 values of k, the pairs go in blocks too:
  // 8 blocks of 512 pairs + 52, and an odd K; and past a block of rows, of
  // panels and of k, with short last ones.)
  std::vector<mnk> pair_shapes = shapes;
  for (mnk s : {mnk{9, 41, 4200}, mnk{19, 48, 5201}, mnk{130, 530, 4200}}) {
    REQUIRE((s.k + 1) / 2 > ctg::detail::gemm_long_k);
    pair_shapes.push_back(s);
  }
  for (mnk s : pair_shapes) {
    if (s.k == 0) continue;
    check(s, random_values<ctg::bf16>(static_cast<std::size_t>(s.m * s.k), 9),
          random_values<ctg::bf16>(static_cast<std::size_t>(s.k * s.n), 10));
  }
  SUBCASE("subnormal operands read as zero, subnormal partial sums flush to zero") {
    const mnk s{9, 33, 7};
    auto a = random_values<ctg::bf16>(static_cast<std::size_t>(s.m * s.k), 11);
    auto b = random_values<ctg::bf16>(static_cast<std::size_t>(s.k * s.n), 12);
    for (std::size_t e = 0; e < a.size(); e += 3) a[e].bits = static_cast<std::uint16_t>(0x0001 + e % 0x7f);  // subnormal
    for (std::size_t e = 0; e < b.size(); e += 5) b[e] = ctg::bf16(std::ldexp(1.0f, -70));  // products ~1e-21 * tiny
    for (std::size_t e = 1; e < a.size(); e += 7) a[e] = ctg::bf16(std::ldexp(1.0f, -60));  // 2^-130: subnormal sums
    check(s, a, b);
  }
}

TEST_CASE("gemm: the same bits on a thread pool, every kernel set and dtype combination") {
  ctg::cpu::thread_pool pool(3);
  auto same = [&]<class TA, class TB, class TC>(mnk s, gemm_isa isa, std::type_identity<TA>, std::type_identity<TB>,
                                                std::type_identity<TC>) {
    const auto a = random_values<TA>(static_cast<std::size_t>(s.m * s.k), 13);
    const auto b = random_values<TB>(static_cast<std::size_t>(s.k * s.n), 14);
    std::vector<TC> one(static_cast<std::size_t>(s.m * s.n)), many(one.size());
    ctg::cpu::gemm_workspace ws, ws2;
    ctg::detail::gemm_with(isa, s.m, s.n, s.k, a.data(), b.data(), one.data(), ws);
    ctg::detail::gemm_with(isa, s.m, s.n, s.k, a.data(), b.data(), many.data(), ws2, &pool);
    std::size_t bad = 0;
    for (std::size_t e = 0; e < one.size(); ++e) bad += bits(one[e]) != bits(many[e]);
    INFO(str(s), " isa ", static_cast<int>(isa));
    CHECK(bad == 0);
  };
  const std::size_t before = pool.shared_runs();
  for (mnk s : {mnk{513, 172, 64}, mnk{64, 700, 129}, mnk{1000, 17, 300}, mnk{33, 65, 2600}}) {
    for (gemm_isa isa : available_isas()) {
      same(s, isa, std::type_identity<ctg::f32>{}, std::type_identity<ctg::f32>{}, std::type_identity<ctg::f32>{});
      same(s, isa, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::bf16>{});
      same(s, isa, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::f32>{});
      same(s, isa, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::f32>{}, std::type_identity<ctg::f32>{});
    }
  }
  CHECK(pool.shared_runs() > before);
}

// Transposed operands are read where they lie: A^T B, A B^T and A^T B^T give
// the bits of the same product on copies transposed by hand, for every kernel
// set and dtype combination, one thread and three, and in f64.
template <class T>
std::vector<T> transposed(const std::vector<T>& x, dim_t rows, dim_t cols) {
  std::vector<T> t(x.size());
  for (dim_t r = 0; r < rows; ++r)
    for (dim_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

TEST_CASE("gemm: transposed operands give the bits of transposing first") {
  ctg::cpu::thread_pool pool(3);
  auto check = [&]<class TA, class TB, class TC>(mnk s, gemm_isa isa, std::type_identity<TA>, std::type_identity<TB>,
                                                 std::type_identity<TC>) {
    const auto a = random_values<TA>(static_cast<std::size_t>(s.m * s.k), 21);  // op(A): M x K
    const auto b = random_values<TB>(static_cast<std::size_t>(s.k * s.n), 22);  // op(B): K x N
    const auto at = transposed(a, s.m, s.k), bt = transposed(b, s.k, s.n);      // stored [K, M], [N, K]
    std::vector<TC> want(static_cast<std::size_t>(s.m * s.n)), got(want.size());
    ctg::cpu::gemm_workspace ws;
    ctg::detail::gemm_with(isa, s.m, s.n, s.k, a.data(), b.data(), want.data(), ws);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (ctg::cpu::thread_pool* p : {static_cast<ctg::cpu::thread_pool*>(nullptr), &pool}) {
          std::fill(got.begin(), got.end(), ctg::from_float<TC>(-7.0f));
          ctg::detail::gemm_with(isa, s.m, s.n, s.k, ta ? at.data() : a.data(), tb ? bt.data() : b.data(), got.data(),
                                 ws, p, {ta, tb});
          std::size_t bad = 0;
          for (std::size_t e = 0; e < want.size(); ++e) bad += bits(got[e]) != bits(want[e]);
          INFO(str(s), " isa ", static_cast<int>(isa), " transpose_a ", ta, " transpose_b ", tb, " pool ", p != nullptr);
          CHECK(bad == 0);
        }
  };
  // (32 x 300 x 70 and 40 x 172 x 2100 with B transposed are computed
  // transposed, C^T = B A^T, the second over blocks of k.)
  CHECK(ctg::detail::gemm_computed_transposed(32, 300, {.transpose_b = true}, {}));
  CHECK(ctg::detail::gemm_computed_transposed(40, 172, {.transpose_b = true}, {}));
  CHECK_FALSE(ctg::detail::gemm_computed_transposed(40, 172, {.transpose_a = true, .transpose_b = true}, {}));
  for (mnk s : {mnk{1, 1, 1}, mnk{17, 33, 17}, mnk{9, 172, 65}, mnk{65, 31, 8}, mnk{257, 70, 129}, mnk{3, 17, 0},
                mnk{21, 40, 2100}, mnk{32, 300, 70}, mnk{40, 172, 2100}}) {
    check(s, gemm_isa::portable, std::type_identity<double>{}, std::type_identity<double>{}, std::type_identity<double>{});
    for (gemm_isa isa : available_isas()) {
      check(s, isa, std::type_identity<ctg::f32>{}, std::type_identity<ctg::f32>{}, std::type_identity<ctg::f32>{});
      check(s, isa, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::bf16>{});
      check(s, isa, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::f32>{});
      check(s, isa, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::f32>{}, std::type_identity<ctg::f32>{});
    }
  }
}

// add_to_c (C += op(A) op(B)) starts each output's chain from C's value: a
// batch's products added one after another into a zeroed C are bit for bit
// one product over all their k (a matmul summed over its batches:
// cpu::run_summed_matmul), on every f32 kernel set, transposed or not,
// with threads, over blocks of k too.
TEST_CASE("gemm: add_to_c continues each output's chain (a batch's products summed as one product over their k)") {
  ctg::cpu::thread_pool pool(3);
  auto check = [&]<class T>(mnk s, dim_t batches, gemm_isa isa, std::type_identity<T>) {
    const dim_t kk = s.k * batches;  // the concatenated product: op(A) [M, kk], op(B) [kk, N]
    const auto a = random_values<T>(static_cast<std::size_t>(s.m * kk), 31);
    const auto b = random_values<T>(static_cast<std::size_t>(kk * s.n), 32);
    const auto want = fma_chain<T, T, float>({s.m, s.n, kk}, a, b);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (ctg::cpu::thread_pool* p : {static_cast<ctg::cpu::thread_pool*>(nullptr), &pool}) {
          std::vector<float> got(want.size(), 0.0f);
          ctg::cpu::gemm_workspace ws;
          for (dim_t t = 0; t < batches; ++t) {
            std::vector<T> at(static_cast<std::size_t>(s.m * s.k)), bt(static_cast<std::size_t>(s.k * s.n));
            for (dim_t i = 0; i < s.m; ++i)  // batch t's op(A): columns [t K, (t + 1) K) of A
              for (dim_t k = 0; k < s.k; ++k) at[i * s.k + k] = a[i * kk + t * s.k + k];
            for (dim_t k = 0; k < s.k; ++k)  // its op(B): rows [t K, (t + 1) K) of B
              for (dim_t j = 0; j < s.n; ++j) bt[k * s.n + j] = b[(t * s.k + k) * s.n + j];
            const auto as = ta ? transposed(at, s.m, s.k) : at, bs = tb ? transposed(bt, s.k, s.n) : bt;
            ctg::detail::gemm_with(isa, s.m, s.n, s.k, as.data(), bs.data(), got.data(), ws, p,
                                   {.transpose_a = ta, .transpose_b = tb, .add_to_c = true});
          }
          std::size_t bad = 0;
          for (std::size_t e = 0; e < want.size(); ++e) bad += bits(got[e]) != bits(want[e]);
          INFO(str(s), " x ", batches, " isa ", static_cast<int>(isa), " transpose_a ", ta, " transpose_b ", tb,
               " pool ", p != nullptr);
          CHECK(bad == 0);
        }
  };
  for (gemm_isa isa : {gemm_isa::portable, gemm_isa::avx2, gemm_isa::avx512}) {
    if (!ctg::detail::gemm_isa_available(isa)) continue;
    for (auto [s, batches] : {std::pair{mnk{17, 33, 17}, dim_t{3}}, std::pair{mnk{40, 172, 64}, dim_t{2}},
                              std::pair{mnk{9, 41, 2100}, dim_t{2}}, std::pair{mnk{5, 7, 1}, dim_t{4}}}) {
      check(s, batches, isa, std::type_identity<ctg::f32>{});
      check(s, batches, isa, std::type_identity<ctg::bf16>{});
    }
  }
  // A narrow C holds no chain to continue: refused.
  const std::vector<ctg::bf16> a(6), b(6);
  std::vector<ctg::bf16> c(4);
  ctg::cpu::gemm_workspace ws;
  CHECK_THROWS_WITH_AS(ctg::cpu::gemm(2, 2, 3, a.data(), b.data(), c.data(), ws, nullptr, {.add_to_c = true}),
                       "ctg: gemm: add_to_c needs an f32 or f64 C (a narrow C does not hold the sums it rounds)", ctg::error);
}

// A transposed A is packed by tile of MR rows before the kernels read it
// (k-major within a tile; pairs of k for vdpbf16ps): each row's values, and
// zeros past the last row, where the returned gemm_rows says they are. The
// pairs' layout is checked here on every host; end to end it runs only where
// the CPU has AVX512-BF16 (the transposed-operand tests above).
TEST_CASE("gemm: a transposed A's packed tiles hold each row's values where the kernels read them") {
  const dim_t M = 19, K = 7, i0 = 2, i1 = 19, K2 = (K + 1) / 2;  // 17 rows: the last tile short
  const auto a = random_values<ctg::bf16>(static_cast<std::size_t>(M * K), 31);  // A stored [K, M]
  for (int mr : {4, 6, 8}) {
    CAPTURE(mr);
    const dim_t tiles = (i1 - i0 + mr - 1) / mr;
    std::vector<float> f(static_cast<std::size_t>(tiles * mr * K), -1.0f);
    const auto fr = ctg::detail::gemm_pack_transposed_a(mr, M, K, a.data(), i0, i1, f.data());
    std::vector<std::uint32_t> pairs(static_cast<std::size_t>(tiles * mr * K2), 0xFFFFFFFFu);
    const auto pr = ctg::detail::gemm_pair_transposed_a(mr, M, K, a.data(), i0, i1, pairs.data());
    std::size_t bad = 0;
    for (dim_t i = i0; i < i0 + tiles * mr; ++i) {  // rows past i1 too: zeros
      const dim_t t0 = (i - i0) / mr * mr, r = (i - i0) % mr;
      const bool row = i < i1;
      for (dim_t k = 0; k < K; ++k) {
        const float want = row ? ctg::load_as<ctg::bf16>(a[k * M + i]) : 0.0f;
        bad += bits(fr.base[t0 * fr.tile_step + r * fr.row_step + k * fr.k_step]) != bits(want);
      }
      for (dim_t p = 0; p < K2; ++p) {
        const std::uint16_t* at = pr.base + t0 * pr.tile_step + r * pr.row_step + p * pr.k_step;
        const std::uint16_t lo = row ? a[2 * p * M + i].bits : 0;
        const std::uint16_t hi = row && 2 * p + 1 < K ? a[(2 * p + 1) * M + i].bits : 0;
        bad += at[0] != lo || at[1] != hi;
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("gemm: the vdpbf16ps reference chain reads transposed operands") {
  // The reference itself, against a plain loop over hand-transposed copies.
  const mnk s{5, 7, 9};
  const auto a = random_values<ctg::bf16>(45, 23), b = random_values<ctg::bf16>(63, 24);
  std::vector<float> want(35), got(35);
  ctg::detail::gemm_bf16_pairs_reference(s.m, s.n, s.k, a.data(), b.data(), want.data());
  ctg::detail::gemm_bf16_pairs_reference(s.m, s.n, s.k, transposed(a, s.m, s.k).data(), transposed(b, s.k, s.n).data(),
                                         got.data(), {true, true});
  for (std::size_t e = 0; e < want.size(); ++e) CHECK(bits(got[e]) == bits(want[e]));
}

// Products that share B (gemm_sharing_b, B packed once) give each product
// the bits of its own gemm call: out-of-order and overlapping A offsets,
// scattered C offsets, every kernel set and dtype combination, transposed
// operands, one thread and three (tasks across products and within one).
TEST_CASE("gemm_sharing_b: each product the bits of its own gemm, at its offsets (one product too)") {
  ctg::cpu::thread_pool pool(3);
  auto check = [&]<class TA, class TB, class TC>(mnk s, gemm_isa isa, std::type_identity<TA>, std::type_identity<TB>,
                                                 std::type_identity<TC>) {
    const dim_t mk = s.m * s.k, mn = s.m * s.n;
    const std::vector<dim_t> a_off = {3 * mk, 0, mk + 1, 3 * mk}, c_off = {2 * mn + 5, 0, 3 * mn + 7, mn + 2};
    const auto a = random_values<TA>(static_cast<std::size_t>(4 * mk + 1), 31);
    const auto b = random_values<TB>(static_cast<std::size_t>(s.k * s.n), 32);
    // (One product alone, at offsets: the path of a batch's group of one, which
    // may compute it transposed: gemm_computed_transposed.)
    for (const dim_t count : {dim_t{4}, dim_t{1}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const ctg::cpu::gemm_products ps{a_off.data(), c_off.data(), count};
        std::vector<TC> want(static_cast<std::size_t>(4 * mn + 8), ctg::from_float<TC>(-7.0f));
        ctg::cpu::gemm_workspace ws;
        for (std::size_t p = 0; p < static_cast<std::size_t>(count); ++p)
          ctg::detail::gemm_with(isa, s.m, s.n, s.k, a.data() + a_off[p], b.data(), want.data() + c_off[p], ws,
                                 nullptr, {ta, tb});
        for (ctg::cpu::thread_pool* pl : {static_cast<ctg::cpu::thread_pool*>(nullptr), &pool}) {
          std::vector<TC> got(want.size(), ctg::from_float<TC>(-7.0f));
          ctg::detail::gemm_with(isa, s.m, s.n, s.k, a.data(), b.data(), got.data(), ws, pl, {ta, tb}, ps);
          std::size_t bad = 0;
          for (std::size_t e = 0; e < want.size(); ++e) bad += bits(got[e]) != bits(want[e]);
          INFO(str(s), " isa ", static_cast<int>(isa), " products ", count, " transpose_a ", ta, " transpose_b ", tb,
               " pool ", pl != nullptr);
          CHECK(bad == 0);
        }
      }
  };
  for (mnk s : {mnk{1, 1, 1}, mnk{17, 33, 17}, mnk{128, 32, 256}, mnk{65, 172, 65}, mnk{3, 17, 0}, mnk{20, 40, 2100},
                mnk{32, 300, 70}}) {
    check(s, gemm_isa::portable, std::type_identity<double>{}, std::type_identity<double>{}, std::type_identity<double>{});
    for (gemm_isa isa : available_isas()) {
      check(s, isa, std::type_identity<ctg::f32>{}, std::type_identity<ctg::f32>{}, std::type_identity<ctg::f32>{});
      check(s, isa, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::bf16>{});
      check(s, isa, std::type_identity<ctg::bf16>{}, std::type_identity<ctg::f32>{}, std::type_identity<ctg::f32>{});
    }
  }
}

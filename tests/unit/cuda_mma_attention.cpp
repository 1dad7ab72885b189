// The tensor-core attention kernels (exec/cuda/attention_mma.hpp) run on the
// CPU: each block is 128 host threads, one per CUDA thread, that meet at a
// barrier wherever the device's threads would (__syncthreads, a warp's mma
// and shuffles); an emulated mma.sync m16n8k16 reads the 32 lanes' registers
// through the PTX fragment layout (mma_fragments.hpp, checked first). So the
// kernels' staging, fragment loads, masks, packs and writes, which are all
// host-device code, are tested here against a double reference; only the
// instructions differ on a GPU (tests/cuda/attention.cu runs them there).
//
// Tolerances, relative to each result's largest entry: lse 1e-5 absolute
// (f32 sums of exact products: ~100 terms of 2^-24 relative error); the
// output and the gradients 1.5e-2 (p and ds are rounded to the input type
// before their products, 2^-9 relative in bf16, and the results rounded to
// it once more; the reference keeps every value in double). A wrong row,
// column, mask or layout is an O(1) error.
#include <doctest/doctest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include <ctg/core/bf16.hpp>
#include <ctg/core/f16.hpp>
#include <ctg/exec/cuda/attention_mma.hpp>
#include <ctg/exec/cuda/mma_fragments.hpp>

namespace {
namespace mma = ctg::cuda::mma;
using tiles = ctg::cuda::attention_mma_tiles;
using attention_tiles_slot = ctg::cuda::attention_tiles::slot;
using ctg::dim_t;

// Which lane and element hold each element of A (16 x 16) and B (16 x 8, as (k, n)).
struct fragment_owners {
  int a_lane[16][16], a_index[16][16], b_lane[16][8], b_index[16][8];
  fragment_owners() {
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 8; ++i) {
        const auto e = mma::a_element(lane, i);
        a_lane[e.row][e.col] = lane, a_index[e.row][e.col] = i;
      }
      for (int i = 0; i < 4; ++i) {
        const auto e = mma::b_element(lane, i);
        b_lane[e.row][e.col] = lane, b_index[e.row][e.col] = i;
      }
    }
  }
};
const fragment_owners owners;

template <class E>
float half_of(std::uint32_t reg, int i) {
  return static_cast<float>(E::from_bits(static_cast<std::uint16_t>(reg >> (16 * (i & 1)))));
}

// 128 host threads as one block of 4 warps.
struct emulated_block {
  std::barrier<> block{tiles::threads};
  struct warp {
    std::barrier<> step{32};
    std::uint32_t a[32][4], b[32][2];
    float x[32];
  } warps[4];
};

struct emulated_thread {
  emulated_block* blk;
  int id;
  dim_t block_index;

  int thread() const { return id; }
  dim_t block() const { return block_index; }
  void sync() const { blk->block.arrive_and_wait(); }
  float shfl_xor(float v, int mask) const {
    auto& w = blk->warps[id / 32];
    w.x[id % 32] = v;
    w.step.arrive_and_wait();
    const float other = w.x[(id % 32) ^ mask];
    w.step.arrive_and_wait();
    return other;
  }
  // d += a b over the warp: every lane posts its registers, then computes its own 4 elements of d.
  template <class E>
  void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) const {
    auto& w = blk->warps[id / 32];
    const int lane = id % 32;
    std::copy(a, a + 4, w.a[lane]);
    std::copy(b, b + 2, w.b[lane]);
    w.step.arrive_and_wait();
    for (int i = 0; i < 4; ++i) {
      const auto e = mma::c_element(lane, i);
      float sum = d[i];
      for (int k = 0; k < 16; ++k) {
        const int ai = owners.a_index[e.row][k], bi = owners.b_index[k][e.col];
        sum +=
            half_of<E>(w.a[owners.a_lane[e.row][k]][ai / 2], ai) * half_of<E>(w.b[owners.b_lane[k][e.col]][bi / 2], bi);
      }
      d[i] = sum;
    }
    w.step.arrive_and_wait();
  }
};

// body(thread) for every thread of `blocks` blocks, a block at a time.
template <class Body>
void run_blocks(dim_t blocks, Body body) {
  for (dim_t b = 0; b < blocks; ++b) {
    emulated_block blk;
    std::vector<std::thread> threads;
    for (int t = 0; t < tiles::threads; ++t) threads.emplace_back([&, t] { body(emulated_thread{&blk, t, b}); });
    for (auto& t : threads) t.join();
  }
}

double largest(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}
template <class T>
double worst_error(const std::vector<T>& got, const std::vector<double>& want) {
  double w = 0;
  for (std::size_t i = 0; i < got.size(); ++i) w = std::max(w, std::abs(double(static_cast<float>(got[i])) - want[i]));
  return w;
}

// One case: heads of [T, F] in T's layout L, all four kernels against a double reference.
template <class T, int F>
void check_attention(dim_t heads, dim_t tokens, ctg::attention_layout layout) {
  const ctg::rt_shape shape = layout == ctg::attention_layout::token_rows ? ctg::rt_shape{{heads, tokens, F}, 3}
                                                                          : ctg::rt_shape{{heads, F, tokens}, 3};
  const auto a = ctg::detail::attention_heads_of(shape, layout);
  const std::size_t n = std::size_t(heads * tokens * F), rows = std::size_t(heads * tokens);
  auto values = [&](double scale, unsigned seed) {
    std::vector<T> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = T(float(scale * std::sin(0.37 * double(i * seed + 1))));
    return x;
  };
  const auto q = values(2.0, 3), k = values(2.0, 5), v = values(1.0, 7), g = values(1.0, 11);
  auto at = [&](const std::vector<T>& x, dim_t h, dim_t t, dim_t d) {
    return double(static_cast<float>(x[std::size_t(h * a.head_elements() + a.at(t, d))]));
  };

  // The reference, in double.
  const double scale = 1.0 / std::sqrt(double(F));
  std::vector<double> lse(rows), o(n), dq(n), dk(n), dv(n), delta(rows);
  for (dim_t h = 0; h < heads; ++h) {
    std::vector<double> p(std::size_t(tokens * tokens), 0.0), ds(p.size(), 0.0);
    auto el = [&](dim_t t, dim_t d) { return std::size_t(h * a.head_elements() + a.at(t, d)); };
    for (dim_t i = 0; i < tokens; ++i) {
      std::vector<double> s(std::size_t(i + 1));
      double m = -1e300, sum = 0;
      for (dim_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (dim_t d = 0; d < F; ++d) dot += at(q, h, i, d) * at(k, h, j, d);
        s[std::size_t(j)] = dot * scale;
        m = std::max(m, s[std::size_t(j)]);
      }
      for (dim_t j = 0; j <= i; ++j) sum += std::exp(s[std::size_t(j)] - m);
      lse[std::size_t(h * tokens + i)] = m + std::log(sum);
      for (dim_t j = 0; j <= i; ++j) p[std::size_t(i * tokens + j)] = std::exp(s[std::size_t(j)] - m) / sum;
      for (dim_t d = 0; d < F; ++d) {
        double acc = 0;
        for (dim_t j = 0; j <= i; ++j) acc += p[std::size_t(i * tokens + j)] * at(v, h, j, d);
        o[el(i, d)] = acc;
      }
      double dl = 0;
      for (dim_t d = 0; d < F; ++d) dl += at(g, h, i, d) * o[el(i, d)];
      delta[std::size_t(h * tokens + i)] = dl;
      for (dim_t j = 0; j <= i; ++j) {
        double dp = 0;
        for (dim_t d = 0; d < F; ++d) dp += at(g, h, i, d) * at(v, h, j, d);
        ds[std::size_t(i * tokens + j)] = p[std::size_t(i * tokens + j)] * (dp - dl);
      }
    }
    for (dim_t t = 0; t < tokens; ++t)
      for (dim_t d = 0; d < F; ++d) {
        double q_acc = 0, k_acc = 0, v_acc = 0;
        for (dim_t j = 0; j <= t; ++j) q_acc += ds[std::size_t(t * tokens + j)] * at(k, h, j, d);
        for (dim_t i = t; i < tokens; ++i) {
          k_acc += ds[std::size_t(i * tokens + t)] * at(q, h, i, d);
          v_acc += p[std::size_t(i * tokens + t)] * at(g, h, i, d);
        }
        dq[el(t, d)] = q_acc * scale, dk[el(t, d)] = k_acc * scale, dv[el(t, d)] = v_acc;
      }
  }

  // The kernels, on emulated blocks.
  const dim_t blocks = heads * tiles::blocks_per_head(tokens);
  std::vector<std::uint16_t> t0(tiles::token_major_size(F)), t1(t0.size()), f0(tiles::feature_major_size(F)),
      f1(f0.size());
  std::vector<float> stats(2 * tiles::tile_tokens), lse_got(rows, -1.f), delta_in(rows);
  for (std::size_t i = 0; i < rows; ++i) delta_in[i] = float(delta[i]);
  std::vector<T> o_got(n, T(-7.f)), dq_got(n, T(-7.f)), dk_got(n, T(-7.f)), dv_got(n, T(-7.f));
  run_blocks(blocks, [&](const emulated_thread& th) {
    ctg::cuda::attention_lse_mma<T, F>(th, t0.data(), q.data(), k.data(), lse_got.data(), a);
  });
  double lse_err = 0;
  for (std::size_t i = 0; i < rows; ++i) lse_err = std::max(lse_err, std::abs(double(lse_got[i]) - lse[i]));
  CHECK(lse_err <= 1e-5);
  run_blocks(blocks, [&](const emulated_thread& th) {
    ctg::cuda::attention_out_mma<T, F>(th, t0.data(), f0.data(), q.data(), k.data(), v.data(), lse_got.data(),
                                       o_got.data(), a);
  });
  run_blocks(blocks, [&](const emulated_thread& th) {
    ctg::cuda::attention_dq_mma<T, F>(th, t0.data(), t1.data(), f0.data(), q.data(), k.data(), v.data(), lse_got.data(),
                                      g.data(), delta_in.data(), dq_got.data(), a);
  });
  run_blocks(blocks, [&](const emulated_thread& th) {
    ctg::cuda::attention_dkv_mma<T, F>(th, t0.data(), t1.data(), f0.data(), f1.data(), stats.data(), q.data(), k.data(),
                                       v.data(), lse_got.data(), g.data(), delta_in.data(), dk_got.data(),
                                       dv_got.data(), a);
  });
  const double bound = 1.5e-2;
  CHECK(worst_error(o_got, o) <= bound * largest(o));
  // The output is each row over its probabilities' sum: with each row's lse
  // off by an amount of its own (rows g and g + 8 of a fragment differ), the
  // sums are far from 1 and the output is the same.
  {
    std::vector<float> lse_off(lse_got);
    for (std::size_t i = 0; i < rows; ++i) lse_off[i] += float(0.25 * double(i % 11) - 1.0);
    std::vector<T> o_off(n, T(-7.f));
    run_blocks(blocks, [&](const emulated_thread& th) {
      ctg::cuda::attention_out_mma<T, F>(th, t0.data(), f0.data(), q.data(), k.data(), v.data(), lse_off.data(),
                                         o_off.data(), a);
    });
    CHECK(worst_error(o_off, o) <= bound * largest(o));
  }
  CHECK(worst_error(dq_got, dq) <= bound * largest(dq));
  CHECK(worst_error(dk_got, dk) <= bound * largest(dk));
  CHECK(worst_error(dv_got, dv) <= bound * largest(dv));
  MESSAGE("lse ", lse_err, ", o ", worst_error(o_got, o) / largest(o), ", dq ", worst_error(dq_got, dq) / largest(dq),
          ", dk ", worst_error(dk_got, dk) / largest(dk), ", dv ", worst_error(dv_got, dv) / largest(dv));
}
}  // namespace

TEST_CASE("mma.sync m16n8k16 fragments: every element once, D's layout is A's, register loads in distinct banks") {
  int a_seen[16][16] = {}, b_seen[16][8] = {}, c_seen[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const auto e = mma::a_element(lane, i);
      REQUIRE((e.row >= 0 && e.row < 16 && e.col >= 0 && e.col < 16));
      ++a_seen[e.row][e.col];
      // A's element i is D's element i % 4 of the left (i < 4) or right 8 columns.
      const auto d = mma::c_element(lane, i % 4);
      CHECK((e.row == d.row && e.col == d.col + 8 * (i / 4)));
    }
    for (int i = 0; i < 4; ++i) {
      const auto b = mma::b_element(lane, i), c = mma::c_element(lane, i);
      REQUIRE(
          (b.row >= 0 && b.row < 16 && b.col >= 0 && b.col < 8 && c.row >= 0 && c.row < 16 && c.col >= 0 && c.col < 8));
      ++b_seen[b.row][b.col], ++c_seen[c.row][c.col];
    }
  }
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) CHECK(a_seen[r][c] == 1);
    for (int c = 0; c < 8; ++c) CHECK((b_seen[r][c] == 1 && c_seen[r][c] == 1));
  }
  // A register's two halves are consecutive columns: one 32-bit load; the
  // 32 lanes' loads of one register hit 32 distinct banks (4-byte words).
  for (int ld : {tiles::token_major_ld(16), tiles::token_major_ld(32), tiles::token_major_ld(48),
                 tiles::token_major_ld(64), tiles::token_major_ld(96), tiles::token_major_ld(128),
                 tiles::feature_major_ld}) {
    CAPTURE(ld);
    for (int reg = 0; reg < 4; ++reg) {
      bool banks[32] = {};
      for (int lane = 0; lane < 32; ++lane) {
        const int at = mma::a_register_at(lane, reg, ld, 16, 32);
        const auto lo = mma::a_element(lane, 2 * reg), hi = mma::a_element(lane, 2 * reg + 1);
        CHECK((at % 2 == 0 && hi.row == lo.row && hi.col == lo.col + 1));
        banks[(at / 2) % 32] = true;
      }
      CHECK(std::count(banks, banks + 32, true) == 32);
    }
    for (int reg = 0; reg < 2; ++reg) {
      bool banks[32] = {};
      for (int lane = 0; lane < 32; ++lane) {
        const int at = mma::b_register_at(lane, reg, ld, 8, 16);
        CHECK(at % 2 == 0);
        banks[(at / 2) % 32] = true;
      }
      CHECK(std::count(banks, banks + 32, true) == 32);
    }
  }
}

TEST_CASE(
    "tensor-core attention tiles: staging covers a tile once in chunks; a chunk of keys is skipped only when all of it "
    "is masked") {
  // A warp's 2-byte stores, one per lane, to 16-bit offsets: the most distinct 32-bit words in one bank.
  auto bank_conflict = [](const std::vector<int>& offsets) {
    int most = 0;
    for (int bank = 0; bank < 32; ++bank) {
      std::vector<int> words;
      for (int at : offsets)
        if (at / 2 % 32 == bank && std::find(words.begin(), words.end(), at / 2) == words.end())
          words.push_back(at / 2);
      most = std::max(most, int(words.size()));
    }
    return most;
  };
  for (int features : {16, 32, 48, 64, 96, 128})
    for (bool along_tokens : {false, true})  // stage: chunks of 8 along x's contiguous axis
      for (bool across : {false, true}) {
        CAPTURE(features);
        CAPTURE(along_tokens);
        CAPTURE(across);
        std::vector<int> token_major(std::size_t(tiles::token_major_size(features)), 0),
            feature_major(std::size_t(tiles::feature_major_size(features)), 0);
        auto element = [&](attention_tiles_slot s, int i) {
          return attention_tiles_slot{s.row + (along_tokens ? i : 0), s.feature + (along_tokens ? 0 : i)};
        };
        for (int t = 0; t < tiles::threads; ++t)
          for (int c = t; c < tiles::chunks(features); c += tiles::threads) {
            const auto s = tiles::chunk_start(c, features, along_tokens, across);
            CHECK((along_tokens ? s.row % 8 == 0 : s.feature % 8 == 0));
            for (int i = 0; i < 8; ++i) {
              const auto e = element(s, i);
              REQUIRE((e.row < tiles::tile_tokens && e.feature < features));
              ++token_major[std::size_t(tiles::token_major_at(e.row, e.feature, features))];
              ++feature_major[std::size_t(tiles::feature_major_at(e.row, e.feature))];
            }
          }
        CHECK(std::count(token_major.begin(), token_major.end(), 1) == tiles::tile_tokens * features);
        CHECK(std::count(feature_major.begin(), feature_major.end(), 1) == tiles::tile_tokens * features);
        CHECK(std::count_if(token_major.begin(), token_major.end(), [](int v) { return v > 1; }) == 0);
        CHECK(std::count_if(feature_major.begin(), feature_major.end(), [](int v) { return v > 1; }) == 0);
        // The first warp's loads: in order along, consecutive in x; across, on consecutive lines.
        for (int c = 1; c < 32; ++c) {
          const auto s = tiles::chunk_start(c, features, along_tokens, across),
                     prev = tiles::chunk_start(c - 1, features, along_tokens, across);
          if (!across && along_tokens)
            CHECK(((s.feature == prev.feature && s.row == prev.row + 8) ||
                   (s.feature == prev.feature + 1 && s.row == 0)));
          if (!across && !along_tokens)
            CHECK(((s.row == prev.row && s.feature == prev.feature + 8) || (s.row == prev.row + 1 && s.feature == 0)));
          if (across && along_tokens)
            CHECK(((s.row == prev.row && s.feature == prev.feature + 1) || (s.row == prev.row + 8 && s.feature == 0)));
          if (across && !along_tokens) CHECK((s.feature == prev.feature && s.row == prev.row + 1));
        }
        // In order across, the 2-byte stores of each of a chunk's 8 elements, into the tile whose rows run
        // across x, by each warp: one word to a bank (Dh 16: two lines of 16 side by side, 2).
        if (across)
          for (int c0 = 0; c0 < tiles::chunks(features); c0 += 32)
            for (int i = 0; i < 8; ++i) {
              std::vector<int> offsets;
              for (int c = c0; c < c0 + 32; ++c) {
                const auto e = element(tiles::chunk_start(c, features, along_tokens, true), i);
                offsets.push_back(along_tokens ? tiles::token_major_at(e.row, e.feature, features)
                                               : tiles::feature_major_at(e.row, e.feature));
              }
              CHECK(bank_conflict(offsets) <= (features == 16 && along_tokens ? 2 : 1));
            }
      }
  // 16-byte stores where a tile's rows run along the chunk: their starts are 16-byte aligned.
  for (int features : {16, 32, 48, 64, 96, 128}) CHECK(tiles::token_major_ld(features) % 8 == 0);
  CHECK(tiles::feature_major_ld % 8 == 0);
  alignas(16) static const std::uint16_t data[16] = {};
  CHECK(tiles::wide_chunks(false, 37, data));
  CHECK_FALSE(tiles::wide_chunks(true, 37, data));  // a chunk of tokens would straddle the last one
  CHECK(tiles::wide_chunks(true, 40, data));
  CHECK_FALSE(tiles::wide_chunks(false, 40, data + 1));
  for (dim_t q0 = 0; q0 < 96; q0 += 16)
    for (dim_t k0 = 0; k0 < 96; k0 += 16) {
      bool any = false;
      for (dim_t i = q0; i < q0 + 16; ++i)
        for (dim_t j = k0; j < k0 + 16; ++j) any |= j <= i;
      CHECK(tiles::chunk_seen(q0, k0) == any);
    }
  CHECK(tiles::takes<ctg::bf16>(64));
  CHECK(tiles::takes<ctg::f16>(16));
  CHECK_FALSE(tiles::takes<ctg::bf16>(8));
  CHECK(tiles::takes<ctg::bf16>(128));
  CHECK_FALSE(tiles::takes<ctg::bf16>(144));
  CHECK_FALSE(tiles::takes<ctg::bf16>(72));
  // Shared memory: GPT-2's heads of 64 within the 48 KB any block may take;
  // heads of 128 need more for dq and dk/dv (the launch allows it).
  CHECK(tiles::shared_bytes(tiles::dkv_tiles, 64) == 2 * (2 * 64 * 72 + 2 * 64 * 72) + 512);
  CHECK(tiles::shared_bytes(tiles::dkv_tiles, 64) <= 48 * 1024);
  CHECK(tiles::shared_bytes(tiles::dkv_tiles, 128) == 2 * (2 * 64 * 136 + 2 * 128 * 72) + 512);
  CHECK(tiles::shared_bytes(tiles::lse_tiles, 128) == 2 * 64 * 136);
  CHECK(tiles::shared_bytes(tiles::out_tiles, 128) == 2 * (64 * 136 + 128 * 72));
  CHECK(tiles::shared_bytes(tiles::dq_tiles, 128) == 2 * (2 * 64 * 136 + 128 * 72));
  CHECK_FALSE(tiles::takes<float>(64));
}

TEST_CASE("tensor-core attention on emulated warps: lse, output, dq, dk and dv against a double reference") {
  using L = ctg::attention_layout;
  SUBCASE("bf16, token rows, Dh 32, two heads of 100 tokens") { check_attention<ctg::bf16, 32>(2, 100, L::token_rows); }
  SUBCASE("bf16, feature rows, Dh 64, 70 tokens (element loads)") {
    check_attention<ctg::bf16, 64>(1, 70, L::feature_rows);
  }
  SUBCASE("f16, token rows, Dh 16, 37 tokens") { check_attention<ctg::f16, 16>(2, 37, L::token_rows); }
  SUBCASE("bf16, feature rows, Dh 128, 72 tokens") { check_attention<ctg::bf16, 128>(1, 72, L::feature_rows); }
  SUBCASE("f16, feature rows, Dh 48, 136 tokens (16-byte chunks of tokens)") {
    check_attention<ctg::f16, 48>(1, 136, L::feature_rows);
  }
}

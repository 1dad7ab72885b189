// A row group's CUDA block: each thread folds its part of every row
// reduction and writes its outputs (cuda::row_part, cuda::row_outputs:
// exec/cuda/row_thread.hpp, host and device code), in 16-byte chunks where
// the launch allows, else element by element; CUB combines the parts. Here
// every thread of blocks of several sizes runs on the CPU over real groups'
// rows: each part is the fold of the thread's own elements read one at a
// time (the same bits, and the same elements whether the loads are wide or
// not: the block's bits follow the shape alone), the parts together cover
// the row once, the row
// cache keeps every element's value, and the outputs are the body's at
// every element, cached or not.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/chunk_width.hpp>
#include <ctg/exec/cuda/row_thread.hpp>

#include "../common/group_fixture.hpp"

namespace {
using ctg::dim_t;

// The elements thread `thread` of `threads` folds, in its order: chunks of
// V where the row is a multiple of them, whether their loads are wide or not.
std::vector<dim_t> elements_of(dim_t L, dim_t V, dim_t thread, dim_t threads) {
  std::vector<dim_t> js;
  if (V > 1 && L % V == 0) {
    for (dim_t ch = thread; ch < L / V; ch += threads)
      for (dim_t k = 0; k < V; ++k) js.push_back(ch * V + k);
  } else {
    for (dim_t j = thread; j < L; j += threads) js.push_back(j);
  }
  return js;
}

template <class Step, class Root>
void check_rows(Step, Root, dim_t batch, bool expect_chunks) {
  test_groups::fixture_of<Step, Root> g(batch, static_cast<unsigned>(batch) + 5);
  using F = decltype(g);
  using Plan = typename F::Plan;
  static_assert(Plan::loop == ctg::loop_kind::rows || Plan::loop == ctg::loop_kind::row_reduce);
  using Body = typename Plan::body;
  using T = typename Plan::dtype;
  using S = typename F::S;
  using ctx_t = typename Plan::context;
  constexpr dim_t V = ctg::cuda::plan_chunk<Plan>;
  const auto& ctx = g.ctx;
  const auto& layout = g.layout;
  const std::size_t row_length = static_cast<std::size_t>(layout.row_length());
  test_groups::skewed_bytes out_bytes(row_length * sizeof(T), 0), side_bytes(row_length * sizeof(S), 0);
  // A row's outputs: the root's, and a side output's (a cast of it) where the group has one.
  typename Plan::outputs row_out;
  row_out.root = reinterpret_cast<T*>(out_bytes.data());
  if constexpr (F::has_side) row_out.side = reinterpret_cast<S*>(side_bytes.data());
  if constexpr (F::has_side) g.run_cpu();  // (the CPU's side output, in g.cpu_side)
  const dim_t width = ctg::cuda::chunk_width<Plan>(ctx, layout, row_out);
  CHECK((width > 1) == expect_chunks);
  if (width > 1) CHECK(width == V);

  const dim_t L = layout.row_length(), rows = layout.rows();
  for (dim_t row = 0; row < rows; ++row)
    for (dim_t w : {width, dim_t{1}})
      for (dim_t threads : {dim_t{3}, dim_t{32}, dim_t{256}}) {
        INFO("row ", row, " of ", rows, ", width ", w, ", ", threads, " threads");
        ctx_t t = ctx;
        layout.enter_row(t, row);
        // Each reduction in slot order, as the block computes them.
        auto reduce = [&]<class Q>(std::type_identity<Q>) {
          using X = typename Q::child;
          using Kept = decltype(X::value(t, dim_t{0}));
          std::vector<Kept> keep(static_cast<std::size_t>(L), std::numeric_limits<Kept>::quiet_NaN());
          double combined = Q::op::template identity<double>(), in_row = combined, magnitude = 0;
          for (dim_t th = 0; th < threads; ++th) {
            const double part = ctg::cuda::row_part<Q, V>(t, L, w, th, threads, keep.data());
            double want = Q::op::template identity<double>();
            for (dim_t j : elements_of(L, V, th, threads))
              want = Q::op::combine(want, static_cast<double>(X::value(t, j)));
            CHECK(std::memcmp(&part, &want, sizeof(double)) == 0);
            combined = Q::op::combine(combined, part);
          }
          for (dim_t j = 0; j < L; ++j) {
            const Kept v = X::value(t, j);
            REQUIRE(std::memcmp(&keep[static_cast<std::size_t>(j)], &v, sizeof(Kept)) == 0);
            in_row = Q::op::combine(in_row, static_cast<double>(v));
            magnitude += std::abs(static_cast<double>(v));
          }
          // Every element once: the parts' combination is the row's, but for rounding.
          CHECK(std::abs(combined - in_row) <= 1e-12 * magnitude);
          return std::pair{Q::value_of(combined, L), std::move(keep)};
        };
        [&]<class... Rs>(ctg::tl::list<Rs...>) {
          ((t.local[Rs::slot] = reduce(std::type_identity<Rs>{}).first), ...);
        }(typename Plan::reductions{});
        if constexpr (Plan::loop == ctg::loop_kind::rows) {
          auto outputs = [&]<class B>(std::type_identity<B>, const auto& c) {
            std::memset(out_bytes.data(), 0, row_length * sizeof(T));
            std::memset(side_bytes.data(), 0xA5, row_length * sizeof(S));
            for (dim_t th = 0; th < threads; ++th) ctg::cuda::row_outputs<B, V>(c, L, w, row_out, th, threads);
            std::size_t differ = 0;
            for (dim_t j = 0; j < L; ++j) {
              const T want = ctg::store_as<T>(Body::value(t, j));
              differ += std::memcmp(&row_out.root[j], &want, sizeof(T)) != 0;
              if constexpr (F::has_side)
                differ += std::memcmp(&row_out.side[j], &g.cpu_side[static_cast<std::size_t>(row * L + j)], sizeof(S)) != 0;
            }
            CHECK(differ == 0);
          };
          outputs(std::type_identity<Body>{}, t);
          using cached = typename ctg::detail::row_cache_of<Body, typename Plan::reductions>::type;
          if constexpr (!std::is_void_v<cached>) {  // outputs read from the row cache
            auto [value, keep] = reduce(std::type_identity<cached>{});
            CHECK(value == t.local[cached::slot]);
            ctg::kernel::kept_context<ctx_t, typename decltype(keep)::value_type> kc;
            static_cast<ctx_t&>(kc) = t;
            kc.kept = keep.data();
            outputs(std::type_identity<ctg::detail::row_cache_body<Body, cached>>{}, kc);
            // Each thread reads back only the cache entries it kept itself (a
            // cache holding its own, NaN elsewhere): the block does not wait
            // before the next row's reductions overwrite the cache. (With
            // width 1 on rows of whole chunks, a thread kept chunks and wrote
            // elements: other threads' entries.)
            std::size_t foreign = 0;
            for (dim_t th = 0; th < threads; ++th) {
              using Kept = typename decltype(keep)::value_type;
              std::vector<Kept> own(static_cast<std::size_t>(L), std::numeric_limits<Kept>::quiet_NaN());
              (void)ctg::cuda::row_part<cached, V>(t, L, w, th, threads, own.data());
              kc.kept = own.data();
              std::memset(out_bytes.data(), 0, row_length * sizeof(T));
              ctg::cuda::row_outputs<ctg::detail::row_cache_body<Body, cached>, V>(kc, L, w, row_out, th, threads);
              for (dim_t j : elements_of(L, V, th, threads)) {
                const T want = ctg::store_as<T>(Body::value(t, j));
                foreign += std::memcmp(&row_out.root[j], &want, sizeof(T)) != 0;
              }
            }
            CHECK(foreign == 0);
          }
        }
      }
}

using X64 = ctg::input<"x", ctg::f32, ctg::dyn, 64>;
using H64 = ctg::input<"h", ctg::bf16, ctg::dyn, 64>;
using W64 = ctg::param<"w", ctg::bf16, 64>;
using X37 = ctg::input<"x", ctg::f32, ctg::dyn, 37>;
using S3d = ctg::input<"s", ctg::f32, ctg::dyn, 8, 1032>;
}  // namespace

// Which row reductions read two chunks before folding (row_thread.hpp): a
// few adds of one buffer, not an exp, not two buffers, not a dropout's draw.
namespace k = ctg::kernel;
using load_h = k::load<0, ctg::bf16, true>;
using square_of_h = k::apply<ctg::op::square, float, k::apply<ctg::op::cast<float>, float, load_h>>;
static_assert(ctg::cuda::folds_two_chunks<square_of_h>);                   // an RMSNorm's mean of squares
static_assert(ctg::cuda::folds_two_chunks<k::load<0, float, true>>);        // a max
static_assert(!ctg::cuda::folds_two_chunks<k::apply<ctg::op::exp, float,  // softmax's sum of exp(x - max)
                                                    k::apply<ctg::op::sub, float, k::load<0, float, true>,
                                                             k::local<0, float>>>>);
static_assert(!ctg::cuda::folds_two_chunks<k::apply<ctg::op::mul, float, k::apply<ctg::op::cast<float>, float, load_h>,
                                                    k::apply<ctg::op::cast<float>, float,
                                                             k::load<1, ctg::bf16, true>>>>);  // two buffers
static_assert(!ctg::cuda::folds_two_chunks<k::apply<ctg::op::mul, float, k::load<0, float, true>,  // a dropout's draw
                                                    k::dropout<1, std::bit_cast<std::uint64_t>(0.1), 1, true, float>>>);

TEST_CASE("a row group, as the CUDA block's threads compute it") {
  for (dim_t batch : {dim_t{1}, dim_t{3}}) {
    // Softmax: a max, then a sum of the values the output reads (the row cache).
    auto soft = ctg::softmax(X64{});
    check_rows(ctg::forward(soft), soft, batch, true);
    // Dropout inside a row group, read by the reduction and the output
    auto dsoft = ctg::softmax(ctg::dropout<"d1">(X64{}, ctg::lit<0.15>));
    check_rows(ctg::forward(dsoft), dsoft, batch, true);
    auto dsum = ctg::sum<-1>(ctg::dropout<"d2">(ctg::exp(X37{}), ctg::lit<0.3>));
    check_rows(ctg::forward(dsum), dsum, batch, false);
    // An RMSNorm in bf16: a mean of squares, a scale row read along the row.
    auto norm = H64{} * ctg::rsqrt(ctg::mean<-1>(ctg::square(H64{})) + ctg::lit<1e-5>) * W64{};
    check_rows(ctg::forward(norm), norm, batch, true);
    // A row reduction as the root (its values' dtype gives the chunk).
    auto root = ctg::sum<-1>(ctg::exp(X64{}));
    check_rows(ctg::forward(root), root, batch, true);
    // Rows of 37: element by element.
    auto odd = ctg::softmax(X37{});
    check_rows(ctg::forward(odd), odd, batch, false);
    // Rows longer than a block's chunks, as attention's scores are.
    auto causal = ctg::softmax(ctg::causal_mask(S3d{}));
    check_rows(ctg::forward(causal), causal, batch, true);
    // Attention's probabilities: softmax in f32 writing its bf16 cast too (a
    // side output), each read by another group (a sum over rows; a product).
    using Wc = ctg::param<"wc", ctg::bf16, 64, 8>;
    auto probs = ctg::cast<ctg::bf16>(soft);
    auto both = ctg::forward(ctg::sum(ctg::sum<0>(soft)) + ctg::sum(ctg::cast<ctg::f32>(ctg::matmul(probs, Wc{}))));
    using Both = decltype(both);
    static_assert(ctg::schedule<Both>::table.side[ctg::tl::index_of<decltype(soft), Both::nodes>::value] ==
                  ctg::tl::index_of<decltype(probs), Both::nodes>::value);
    check_rows(both, soft, batch, true);
  }
}

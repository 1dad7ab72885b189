// Oracle dump for the tiny transformer (checked by check_model.py):
// ctg::nn::transformer<tiny, P> under full<f32> (suffix ".f32") and
// autocast<bf16> (".bf16"), parameters from ctg::nn::init_params(store, seed, 0.2).
//   oracle_model_dump <out.bundle>
// Two cases per policy:
//   model.<tag>         the usual oracle case: params, inputs (ids, pos, targets),
//                       the loss of one value_and_grad step and every gradient
//                       (stacked leaves "layers.{i}.*" have a leading dim = layers).
//   model_adamw.<tag>   the same initial params and inputs, then 3 training steps
//                       (value_and_grad, then ctg::optim::adamw with lr 1e-2,
//                       weight_decay 0.1, max_grad_norm 1.0; its decay of matrices
//                       only under f32, whose bounds are tight enough to tell, of
//                       every leaf under bf16: `decay`, 1 or 0), recording per step k:
//                       step<k>/loss, step<k>/grad/<leaf> (the gradients the update
//                       uses), step<k>/grad_norm (opt.step's return value) and
//                       step<k>/param/<leaf> after the update.
#include <cstdint>
#include <string>
#include <vector>

#include <ctg/optim/adamw.hpp>

#include "oracle.hpp"

namespace {

using ctg::i32;

struct tiny {
  static constexpr ctg::dim_t vocab = 11, max_seq = 8, dim = 16, heads = 2, head_dim = 8, hidden = 24;
  static constexpr std::size_t layers = 2;
};
constexpr std::int64_t batch = 3, seq = 8;
using Ids = ctg::input<"ids", i32, batch, seq>;
using Pos = ctg::input<"pos", i32, seq>;
using Tg = ctg::input<"targets", i32, batch, seq>;

// Repeated tokens (3, 7, 1 recur within and across rows; 5 and 9 never occur, so
// their embedding rows get no gradient); targets are the next token, with some -100.
const std::vector<i32> ids{3, 7, 3, 1, 0, 7, 7, 2,  //
                           10, 3, 3, 8, 1, 4, 6, 1,  //
                           2, 2, 7, 0, 3, 1, 8, 4};
const std::vector<i32> targets{7, 3, 1, -100, 7, 7, 2, 6,  //
                               3, 3, 8, 1, 4, -100, 1, 0,  //
                               2, 7, 0, 3, 1, 8, 4, -100};
const std::vector<i32> positions{0, 1, 2, 3, 4, 5, 6, 7};
constexpr std::uint64_t init_seed = 20240611;
constexpr int train_steps = 3;

template <class T>
void put(oracle::dump& d, const std::string& name, std::span<const T> v, std::vector<std::int64_t> dims) {
  d.writer().add<T>(name, v, std::move(dims));
}

// Every stored leaf's values (param/<leaf>) or gradients (grad/<leaf>) of a store, under prefix.
template <class Store>
void put_params(oracle::dump& d, const std::string& prefix, Store& st) {
  [&]<class... Ps>(ctg::tl::list<Ps...>) {
    (put<typename Ps::dtype>(d, prefix + "param/" + Ps::name.c_str(), st.template param<Ps>(),
                             oracle::static_dims<Ps>()),
     ...);
  }(typename Store::step_type::wrt{});
}
template <class Store>
void put_grads(oracle::dump& d, const std::string& prefix, Store& st) {
  [&]<class... Ps>(ctg::tl::list<Ps...>) {
    (put<typename Ps::dtype>(d, prefix + "grad/" + Ps::name.c_str(), st.template grad<Ps>(),
                             oracle::static_dims<Ps>()),
     ...);
  }(typename Store::step_type::wrt{});
}
void put_inputs(oracle::dump& d, const std::string& prefix) {
  put<i32>(d, prefix + "input/ids", std::span<const i32>(ids), {batch, seq});
  put<i32>(d, prefix + "input/pos", std::span<const i32>(positions), {seq});
  put<i32>(d, prefix + "input/targets", std::span<const i32>(targets), {batch, seq});
}

template <class P>
void model_cases(oracle::dump& d, const std::string& tag) {
  using M = ctg::nn::transformer<tiny, P>;
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  auto st = ctg::make_store(dev, step);
  ctg::nn::init_params(st, init_seed, 0.2);
  auto run = [&] { return step(st, ctg::feed<Ids>(ids), ctg::feed<Pos>(positions), ctg::feed<Tg>(targets)); };

  const std::string grads = "model." + tag + "/";
  const std::string train = "model_adamw." + tag + "/";
  d.begin("model." + tag);
  put_params(d, grads, st);
  put_inputs(d, grads);
  d.begin("model_adamw." + tag);
  put_params(d, train, st);
  put_inputs(d, train);

  const auto decay = tag == "f32" ? ctg::optim::decay_leaves::matrices : ctg::optim::decay_leaves::every_leaf;
  const float decay_code = decay == ctg::optim::decay_leaves::matrices ? 1.0f : 0.0f;
  put<float>(d, train + "decay", std::span<const float>(&decay_code, 1), {});
  ctg::optim::adamw opt(st, {.lr = 1e-2f, .weight_decay = 0.1f, .max_grad_norm = 1.0f, .decay = decay});
  for (int k = 1; k <= train_steps; ++k) {
    run();
    const std::string at = train + "step" + std::to_string(k) + "/";
    if (k == 1) {
      put<float>(d, grads + "loss", st.value(), {});
      put_grads(d, grads, st);
    }
    put<float>(d, at + "loss", st.value(), {});
    put_grads(d, at, st);
    const float norm = opt.step(st);
    put<float>(d, at + "grad_norm", std::span<const float>(&norm, 1), {});
    put_params(d, at, st);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return oracle::run(argc, argv, [](oracle::dump& d) {
    model_cases<ctg::precision::full<ctg::f32>>(d, "f32");
    model_cases<ctg::precision::autocast<ctg::bf16>>(d, "bf16");
  });
}

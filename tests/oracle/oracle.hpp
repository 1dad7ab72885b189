#pragma once
// Helpers for the oracle's dump programs (tests/oracle/*_dump.cpp). A dump
// program builds ctg graphs, fills their leaves from a fixed-seed generator,
// runs steps and writes everything the Python side needs into one bundle
// (bundle.hpp). Names inside the bundle, for a case called "<case>.<dtype>":
//   <case>.<dtype>/param/<leaf>   a trainable leaf's values (as the step saw them)
//   <case>.<dtype>/frozen/<leaf>  a frozen leaf's values
//   <case>.<dtype>/input/<leaf>   a fed input's values
//   <case>.<dtype>/loss           the loss of the step (rank 0)
//   <case>.<dtype>/grad/<leaf>    store.grad<leaf>() after the step
//   <case>.<dtype>/value          the forward value of the case's output, via ctg::forward
// The "<dtype>" suffix picks the tolerance row on the Python side (tolerances.py).
//
// The usual case is `grad_case`: an output `out` built from parameters, the loss
// sum(out * r) with r a random input of out's shape, gradients of every parameter,
// and out's forward value.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <ctg/ctg.hpp>

#include "bundle.hpp"

namespace oracle {

// ------------------------------------------------------------ generator ----
// splitmix64: small, fixed, and the same on every platform.
class rng {
 public:
  explicit rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi), from the top 53 bits.
  double uniform(double lo, double hi) { return lo + (hi - lo) * (static_cast<double>(next() >> 11) * 0x1p-53); }

 private:
  std::uint64_t s_;
};

// A case's seed: FNV-1a of its name without the dtype suffix, so the f32 and bf16
// variants of a case draw the same numbers (rounded to their own dtype).
inline std::uint64_t seed_of(const std::string& case_name) {
  const std::string base = case_name.substr(0, case_name.rfind('.'));
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : base) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// ---------------------------------------------------------- conversions ----
template <class T>
T narrow(double v) {
  if constexpr (std::is_same_v<T, double>) return v;
  else if constexpr (std::is_same_v<T, float>) return static_cast<float>(v);
  else return T(static_cast<float>(v));  // ctg's round-to-nearest-even conversion
}

template <class L>
std::vector<std::int64_t> static_dims() {
  const auto& d = ctg::shape_t<L>::dims;
  return std::vector<std::int64_t>(d.begin(), d.end());
}

// r_like<E>: ctg::input<"r", dtype of E, static dims of E...>, the loss weight of grad_case.
namespace detail {
template <class T, class S>
struct r_input;
template <class T, ctg::dim_t... D>
struct r_input<T, ctg::shape<D...>> {
  using type = ctg::input<"r", T, D...>;
};
}  // namespace detail
template <class E>
using r_like = typename detail::r_input<ctg::dtype_t<E>, ctg::shape_t<E>>::type;

// The range leaves draw from, by leaf name; leaves not listed draw from [-1, 1).
struct range {
  double lo = -1.0, hi = 1.0;
};
using ranges = std::map<std::string, range>;

// --------------------------------------------------------------- a case ----
class case_writer {
 public:
  case_writer(bundle::writer& w, std::string name, ranges r)
      : w_(w), name_(std::move(name)), rng_(seed_of(name_)), ranges_(std::move(r)) {}

  const std::string& name() const { return name_; }

  // Fill stored leaf L (param or frozen) with values drawn from its range, rounded
  // to its dtype, and record what was stored.
  template <class L, class Store>
  void param(Store& st) {
    auto p = st.template param<L>();
    const range r = range_of(L::name.c_str());
    for (auto& x : p) x = narrow<typename L::dtype>(rng_.uniform(r.lo, r.hi));
    const char* kind = ctg::requires_grad_v<L> ? "/param/" : "/frozen/";
    put(kind + std::string(L::name.c_str()), std::span<const typename L::dtype>(p.data(), p.size()),
        static_dims<L>());
  }
  // Copy stored leaf L's values from one store to another (same leaf in another step).
  template <class L, class From, class To>
  static void copy_param(From& from, To& to) {
    auto src = from.template param<L>();
    std::ranges::copy(src, to.template param<L>().begin());
  }

  // Data for input L (dims: its static dims, or the run-time dims for ctg::dyn ones),
  // drawn from its range and recorded. Keep the vector alive while feeding it.
  template <class L>
  std::vector<typename L::dtype> input(std::vector<std::int64_t> dims = static_dims<L>()) {
    std::size_t n = 1;
    for (auto d : dims) n *= static_cast<std::size_t>(d);
    std::vector<typename L::dtype> v(n);
    const range r = range_of(L::name.c_str());
    for (auto& x : v) x = narrow<typename L::dtype>(rng_.uniform(r.lo, r.hi));
    put("/input/" + std::string(L::name.c_str()), std::span<const typename L::dtype>(v), std::move(dims));
    return v;
  }

  // The loss of the last step (store.value(), one element).
  template <class Store>
  void loss(Store& st) {
    auto v = st.value();
    put("/loss", v, {});
  }
  // store.grad<L>() after the last step.
  template <class L, class Store>
  void grad(Store& st) {
    put("/grad/" + std::string(L::name.c_str()), st.template grad<L>(), static_dims<L>());
  }
  // A forward value (a forward step's store.value()).
  template <class T>
  void value(std::span<const T> v, std::vector<std::int64_t> dims) {
    put("/value", v, std::move(dims));
  }

 private:
  range range_of(const std::string& leaf) const {
    auto it = ranges_.find(leaf);
    return it == ranges_.end() ? range{} : it->second;
  }
  template <class T>
  void put(const std::string& what, std::span<const T> v, std::vector<std::int64_t> dims) {
    w_.add<T>(name_ + what, v, std::move(dims));
  }

  bundle::writer& w_;
  std::string name_;
  rng rng_;
  ranges ranges_;
};

// ------------------------------------------------------------ a program ----
// The program: `<dump> <out.bundle>`. Cases run in order; an exception (ctg::error
// included) stops the program with a message naming the case, exit status 1.
class dump {
 public:
  dump(int argc, char** argv) {
    if (argc != 2) {
      std::fprintf(stderr, "usage: %s <out.bundle>\n", argc > 0 ? argv[0] : "dump");
      std::exit(2);
    }
    path_ = argv[1];
  }
  case_writer begin(const std::string& name, ranges r = {}) {
    if (name.find('/') != std::string::npos || name.rfind('.') == std::string::npos)
      throw std::runtime_error("oracle: case name '" + name + "' must be <case>.<dtype> without '/'");
    current_ = name;
    ++cases_;
    return case_writer(w_, name, std::move(r));
  }
  const std::string& current() const { return current_; }
  int finish() {
    w_.save(path_);
    std::printf("oracle: wrote %zu tensors of %d cases to %s\n", w_.tensors().size(), cases_, path_.c_str());
    return 0;
  }
  bundle::writer& writer() { return w_; }

 private:
  bundle::writer w_;
  std::string path_, current_;
  int cases_ = 0;
};

// Runs body(d) and saves; any exception is reported with the case it came from.
template <class Body>
int run(int argc, char** argv, Body body) {
  dump d(argc, argv);
  try {
    body(d);
    return d.finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oracle: case '%s' failed: %s\n", d.current().c_str(), e.what());
    return 1;
  }
}

// ---------------------------------------------------- the usual case ----
// `out` built from parameters Ps... only (no inputs, no frozen leaves):
//   loss = sum(out * r), r = ctg::input<"r", dtype of out, dims of out> (static dims)
// Records every parameter, r, the loss, every parameter's gradient, and out's
// forward value (a ctg::forward step with the same parameter values).
template <class Out, class... Ps>
void grad_case(dump& d, const std::string& name, Out out, ctg::wrt_t<Ps...> w, ranges rg = {}) {
  using R = r_like<Out>;
  auto c = d.begin(name, std::move(rg));
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(out * R{}), w);
  auto st = ctg::make_store(dev, step);
  (c.template param<Ps>(st), ...);
  const auto r = c.template input<R>();
  step(st, ctg::feed<R>(r));
  c.loss(st);
  (c.template grad<Ps>(st), ...);

  auto fwd = ctg::forward(out);
  auto fs = ctg::make_store(dev, fwd);
  (case_writer::copy_param<Ps>(st, fs), ...);
  fwd(fs);
  c.value(fs.value(), static_dims<Out>());
}

}  // namespace oracle

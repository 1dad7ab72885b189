#pragma once
// A store's leaves to and from a safetensors file (the format: io/safetensors_format.hpp),
// through a tensor_map (names and layouts: io/tensor_map.hpp).
//
//   ctg::io::load_safetensors("model.safetensors", store, ctg::io::torch_transformer_map());
//   ctg::io::save_safetensors("out.safetensors", store);            // ctg's own names and layouts
//   ctg::io::save_safetensors("out.safetensors", store, map, {{"format", "pt"}});   // + __metadata__
//
// The leaves are every stored leaf of the store's step (trainable, frozen and
// FP8 state: `!L::fed`), each in its own dtype; any store works that has
// `Store::step_type::nodes` and `store.template param<L>()` (a span of L's
// dtype) or, where the host cannot read its memory (a GPU's),
// `store.download(L{}, span)` and `store.upload(L{}, span)`: its leaves are
// copied to the host, and a load copies them back once every check passed.
//
// load checks everything before it writes anything: the file (every check of
// safetensors_file::read), then for each leaf (each layer's slice of a stacked
// one) that its tensor exists with the leaf's dtype (no conversion) and the
// dims its layout gives, then that every tensor of the file was used. Any
// problem throws ctg::error naming the tensor and the leaf, the expected and the
// found value, and the store is untouched. A tensor may feed several leaves
// (tied weights; the parts of a fused one).
//
// save writes each tensor once (a fused tensor needs all its parts mapped),
// atomically (a temporary file beside it, then a rename); save then load is bitwise.
#include <algorithm>
#include <filesystem>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <ctg/graph/traits.hpp>
#include <ctg/io/between_sets.hpp>
#include <ctg/io/host_copies.hpp>
#include <ctg/io/safetensors_format.hpp>
#include <ctg/io/tensor_map.hpp>

namespace ctg::io {

}  // namespace ctg::io

namespace ctg::detail {
using io::st_dtype;
using io::st_dtype_of;
using io::layout;
using io::tensor_map;
using io::name_of;

// One leaf, or one layer's slice of a stacked leaf, and the tensor that holds it.
struct st_target {
  std::string what;  // "leaf 'layers.{i}.attn.wq' (layer 1)", for messages
  std::string tensor;
  layout how;
  st_dtype dtype;
  rt_shape slice, file;  // the ctg slice's dims and the file tensor's
  std::byte* data;
  bool state;  // an FP8 scaling state leaf (a scale, an amax history)
};

inline std::string with_layer(std::string s, std::size_t k) {
  for (std::size_t at; (at = s.find("{i}")) != std::string::npos;) s.replace(at, 3, std::to_string(k));
  return s;
}

// Can the host read the store's leaves in place (store.param<L>())? Not a GPU's.
template <class Store>
consteval bool host_reads_leaves() {
  if constexpr (requires { Store::backend_type::host_memory; }) return Store::backend_type::host_memory;
  else return true;
}

// The leaves of a store the host cannot read, copied to the host (what save
// writes, and what load writes before put_back()); and the state leaves a
// weights-only load resets.
class st_host_copies {
 public:
  // State leaf L back to its initial value (an FP8 scale 1, a history 0) at put_back().
  template <class L, class Store>
  void reset(Store& store) {
    using T = typename L::dtype;
    copies_.then([&store] {
      std::vector<T> initial(L::dims::static_numel, static_cast<T>(L::initial_value));
      if constexpr (host_reads_leaves<Store>()) std::ranges::copy(initial, store.template param<L>().begin());
      else store.upload(L{}, std::span<const T>(initial));
    });
  }
  template <class L, class Store>
  std::byte* add(Store& store) {
    using T = typename L::dtype;
    const std::span<T> host = copies_.add<T>(
        L::dims::static_numel, [&store](std::span<T> h) { store.download(L{}, h); },
        [&store](std::span<const T> h) { store.upload(L{}, h); });
    return reinterpret_cast<std::byte*>(host.data());
  }
  void put_back() const { copies_.put_back(); }

 private:
  host_copies copies_;
};

template <class Store>
std::vector<st_target> st_targets(Store& store, const tensor_map& map, st_host_copies& host) {
  std::vector<st_target> out;
  std::vector<bool> used(map.entries().size(), false);
  using leaves = leaves_t<typename Store::step_type::nodes>;
  [&]<class... Ls>(tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (!L::fed) {
        const std::string leaf = L::name.c_str();
        const tensor_map::entry* e = map.find(leaf);
        if constexpr (L::role == leaf_role::state)
          if (!e && map.skips_state()) {
            host.template reset<L>(store);  // (a load's: the store's scales were for other weights)
            return;
          }
        if (e) used[static_cast<std::size_t>(e - map.entries().data())] = true;
        const std::string tensor = e ? e->tensor : leaf;
        const layout how = e ? e->how : as_is;
        std::byte* bytes = nullptr;
        if constexpr (host_reads_leaves<Store>())
          bytes = reinterpret_cast<std::byte*>(store.template param<L>().data());
        else
          bytes = host.template add<L>(store);
        rt_shape whole;
        whole.rank = L::dims::rank;
        for (std::size_t i = 0; i < whole.rank; ++i) whole.d[i] = L::dims::dims[i];
        const bool per_layer = e && leaf.find("{i}") != std::string::npos && tensor.find("{i}") != std::string::npos;
        if (!per_layer) {
          const std::string what = "leaf '" + leaf + "'";
          out.push_back({what, tensor, how, st_dtype_of<typename L::dtype>, whole, file_shape(how, whole, what), bytes,
                         L::role == leaf_role::state});
          return;
        }
        rt_shape slice;
        slice.rank = whole.rank - 1;
        for (std::size_t i = 0; i < slice.rank; ++i) slice.d[i] = whole.d[i + 1];
        const std::size_t step = static_cast<std::size_t>(slice.numel()) * sizeof(typename L::dtype);
        for (std::size_t k = 0; k < static_cast<std::size_t>(whole.d[0]); ++k) {
          const std::string what = "leaf '" + leaf + "' (layer " + std::to_string(k) + ")";
          out.push_back({what, with_layer(tensor, k), how, st_dtype_of<typename L::dtype>, slice,
                         file_shape(how, slice, what), bytes + k * step, L::role == leaf_role::state});
        }
      }
    };
    (one(std::type_identity<Ls>{}), ...);
    (void)one;
  }(leaves{});
  for (std::size_t i = 0; i < used.size(); ++i)
    if (!used[i])
      throw error("ctg: tensor_map: leaf '" + map.entries()[i].leaf + "' (mapped to tensor '" +
                  map.entries()[i].tensor + "') is not a stored leaf of this model");
  return out;
}

inline std::string shape_text(st_dtype d, const rt_shape& s) {
  return std::string(name_of(d)) + " " + ctg::detail::dims_text(s);
}

}  // namespace ctg::detail

namespace ctg::io {

template <class Store>
void load_safetensors(const std::filesystem::path& path, Store& store, const tensor_map& map = {}) {
  detail::check_between_sets(store, "ctg: safetensors file '" + path.string() + "': ");
  const safetensors_file file = safetensors_file::read(path);
  detail::st_host_copies host;
  const std::vector<detail::st_target> targets = detail::st_targets(store, map, host);
  const auto& tensors = file.tensors();
  std::vector<bool> used(tensors.size(), false);
  std::vector<const safetensors_tensor*> src;
  src.reserve(targets.size());
  for (const auto& t : targets) {
    const safetensors_tensor* f = file.find(t.tensor);
    const std::string head = file.where() + "tensor '" + t.tensor + "' for " + t.what + ": expected ";
    if (!f)
      throw error(head + detail::shape_text(t.dtype, t.file) + ", found no such tensor" +
                  (t.state ? std::string(" (FP8 scaling state, which a file of weights alone does not hold: "
                                         "tensor_map{}.weights_only() loads the weights and starts the state afresh)")
                           : std::string()));
    if (f->dtype != t.dtype)
      throw error(head + "dtype " + std::string(name_of(t.dtype)) + ", found " + std::string(name_of(f->dtype)));
    bool same = f->shape.rank == t.file.rank;
    for (std::size_t i = 0; same && i < t.file.rank; ++i) same = f->shape.d[i] == t.file.d[i];
    if (!same)
      throw error(head + "shape " + ctg::detail::dims_text(t.file) + ", found " + ctg::detail::dims_text(f->shape) +
                  (t.how.kind == layout::as_is && t.how.parts == 1
                       ? std::string()
                       : " (layout " + detail::layout_text(t.how) + ")"));
    used[static_cast<std::size_t>(f - tensors.data())] = true;
    src.push_back(f);
  }
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!used[i])
      throw error(file.where() + "tensor " + detail::tensor_text(tensors[i]) +
                  " is in the file but no leaf of this model maps to it: expected no such tensor");
  // Every check passed: nothing below throws.
  for (std::size_t k = 0; k < targets.size(); ++k) {
    const auto& t = targets[k];
    detail::layout_copy(t.how, t.slice, t.data, const_cast<std::byte*>(src[k]->data.data()), size_of(t.dtype), true);
  }
  host.put_back();
  detail::drop_replaced_grads(store);
}

template <class Store>
void save_safetensors(const std::filesystem::path& path, Store& store, const tensor_map& map = {},
                      const safetensors_metadata& metadata = {}) {
  detail::st_host_copies host;
  const std::vector<detail::st_target> targets = detail::st_targets(store, map, host);
  struct tensor_out {
    const detail::st_target* first;
    std::vector<std::byte> bytes;
    std::vector<bool> parts;
  };
  std::vector<tensor_out> outs;
  for (const auto& t : targets) {
    auto it = std::find_if(outs.begin(), outs.end(), [&](const tensor_out& o) { return o.first->tensor == t.tensor; });
    if (it == outs.end()) {
      outs.push_back({&t, std::vector<std::byte>(static_cast<std::size_t>(t.file.numel()) * size_of(t.dtype)),
                      std::vector<bool>(static_cast<std::size_t>(t.how.parts), false)});
      it = outs.end() - 1;
    }
    const detail::st_target& f = *it->first;
    bool same = f.dtype == t.dtype && f.how.parts == t.how.parts && f.file.rank == t.file.rank;
    for (std::size_t i = 0; same && i < t.file.rank; ++i) same = f.file.d[i] == t.file.d[i];
    if (!same)
      throw error("ctg: tensor_map: tensor '" + t.tensor + "' gets " + detail::shape_text(f.dtype, f.file) +
                  " in " + std::to_string(f.how.parts) + " part(s) from " + f.what + " but " +
                  detail::shape_text(t.dtype, t.file) + " in " + std::to_string(t.how.parts) + " part(s) from " + t.what);
    if (it->parts[static_cast<std::size_t>(t.how.part)])
      throw error("ctg: tensor_map: tensor '" + t.tensor + "': part " + std::to_string(t.how.part) +
                  " is written by two leaves (the second: " + t.what + ")");
    it->parts[static_cast<std::size_t>(t.how.part)] = true;
    detail::layout_copy(t.how, t.slice, t.data, it->bytes.data(), size_of(t.dtype), false);
  }
  std::vector<safetensors_out> list;
  for (const auto& o : outs) {
    for (std::size_t p = 0; p < o.parts.size(); ++p)
      if (!o.parts[p])
        throw error("ctg: tensor_map: tensor '" + o.first->tensor + "': expected all " +
                    std::to_string(o.parts.size()) + " parts mapped, found none for part " + std::to_string(p));
    list.push_back({o.first->tensor, o.first->dtype, o.first->file, o.bytes});
  }
  write_safetensors(path, list, metadata);
}

}  // namespace ctg::io

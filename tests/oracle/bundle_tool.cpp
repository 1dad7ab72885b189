// A small tool over tensor bundles (bundle.hpp), used by check_bundle.py and handy by hand:
//   oracle_bundle_tool list <in.bundle>            one line per tensor: name dtype dims
//   oracle_bundle_tool copy <in.bundle> <out.bundle>
// `copy` decodes every tensor into its C++ element type and writes it back through the
// typed writer, so a round trip Python -> C++ -> Python tests both readers and writers.
#include <cstdio>
#include <exception>
#include <string>

#include "bundle.hpp"

namespace {

template <class T>
void retype(bundle::writer& w, const bundle::tensor& t) {
  const std::vector<T> v = t.as<T>();
  w.add<T>(t.name, std::span<const T>(v), t.dims);
}

int copy(const std::string& in, const std::string& out) {
  bundle::writer w;
  for (const auto& t : bundle::read(in)) {
    switch (t.type) {
      case bundle::dtype::f32: retype<float>(w, t); break;
      case bundle::dtype::f64: retype<double>(w, t); break;
      case bundle::dtype::bf16: retype<ctg::bf16>(w, t); break;
      case bundle::dtype::f16: retype<ctg::f16>(w, t); break;
      case bundle::dtype::i32: retype<std::int32_t>(w, t); break;
    }
  }
  w.save(out);
  return 0;
}

int list(const std::string& in) {
  for (const auto& t : bundle::read(in)) {
    std::string dims;
    for (auto d : t.dims) {
      if (!dims.empty()) dims += ',';
      dims += std::to_string(d);
    }
    std::printf("%s %s [%s]\n", t.name.c_str(), bundle::dtype_name(t.type), dims.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "copy" && argc == 4) return copy(argv[2], argv[3]);
    if (cmd == "list" && argc == 3) return list(argv[2]);
    std::fprintf(stderr, "usage: %s list <in.bundle> | copy <in.bundle> <out.bundle>\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oracle_bundle_tool: %s\n", e.what());
    return 1;
  }
}

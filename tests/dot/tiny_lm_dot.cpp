// The demo's training step (examples/tiny_lm: ctg::nn::transformer at width
// 64, f32) as a DOT graph, and what the drawing must show, for check_render.py:
//   tiny_lm_dot OUT.dot OUT.expected
// OUT.expected: for every node of the step and of its stack's block, a line
//   node <DOT id> <dtype> <grad|no-grad> #<index> <op>
// and for the step and the block, a line
//   groups <cluster name prefix> <number of fusion groups>
// (io/dot.hpp: node ids "n<i>", a stack R's block's "s<R>_n<i>"; group
// clusters "cluster_g<g>", "cluster_s<R>_g<g>").
#include <cstdio>
#include <fstream>
#include <string>

#include <ctg/io/dot.hpp>
#include <tiny_lm/common.hpp>

namespace {

void expect(std::ofstream& out, const ctg::step_description& d, const std::string& prefix) {
  for (std::size_t i = 0; i < d.size(); ++i)
    out << "node " << prefix << "n" << i << " " << d.node[i].dtype << " "
        << (d.node[i].requires_grad ? "grad" : "no-grad") << " #" << i << " " << d.node[i].op << "\n";
  out << "groups " << prefix << " " << d.group_count() << "\n";
  for (const ctg::block_description& b : d.blocks) expect(out, *b.step, prefix + "s" + std::to_string(b.stack) + "_");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tiny_lm_dot OUT.dot OUT.expected\n");
    return 2;
  }
  using M = ctg::nn::transformer<tiny_lm::lm_config<64>, ctg::precision::full<ctg::f32>>;
  auto step = ctg::value_and_grad(M::loss(tiny_lm::Ids{}, tiny_lm::Pos{}, tiny_lm::Targets{}));
  std::ofstream dot(argv[1]), expected(argv[2]);
  dot << ctg::io::to_dot(step);
  expect(expected, ctg::description<decltype(step)>, "");
  return dot && expected ? 0 : 1;
}

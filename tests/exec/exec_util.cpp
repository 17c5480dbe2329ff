#include "exec_util.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>


namespace symmflow::testing {

std::unique_ptr<ir::Graph> parse(const std::string& text, int world_size) {
  ir::ParseOptions o;
  o.world_size = world_size;
  return ir::parse_graph(text, o);
}

std::shared_ptr<const passes::Plan> plan_text(const std::string& text, int world_size) {
  std::shared_ptr<ir::Graph> g = parse(text, world_size);
  return passes::emit_plan(g, passes::plan_memory(*g));
}

Tensor make_input(const Shape& shape, DType dtype, int rank, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  TensorView v = t.view();
  for (int64_t i = 0; i < t.numel(); ++i)
    store_double(v, i, double((i * 7 + rank * 13 + seed * 5) % 11 - 5) * 0.25);
  return t;
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << what << " element " << i;
}

std::string tp_mlp_text(int layers, bool placed) {
  std::string params = "x: f32[16, 64]";
  for (int l = 0; l < layers; ++l) params += fmt::format(", w{}: f32[64, 64]", l);
  std::string body;
  std::string in = "x";
  for (int l = 0; l < layers; ++l) {
    body += fmt::format("  h{} = aten::mm({}, w{}){}\n", l, in, l,
                        placed ? " @ symm[tp] {out_variant = \"aten::mm.out\"}" : "");
    body += fmt::format("  r{} = symm_mem::one_shot_all_reduce(h{}, \"sum\", \"tp\"){}\n", l, l,
                        placed ? " @ regular {out_variant = \"symm_mem::one_shot_all_reduce_out\"}" : "");
    in = fmt::format("r{}", l);
  }
  return fmt::format("group tp\ngraph tp_mlp({}) {{\n{}  return {}\n}}\n", params, body, in);
}

}  // namespace symmflow::testing

// Op tags (Note [op tags] in ops/registry.hpp): the tags of representative built-in ops, tags
// declared through Library::def and Library::tag, the refusals with their exact messages, and a
// pass (fuse_pointwise) that follows a tag rather than a list of names.
#include <functional>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/errors.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/passes/passes.hpp"

namespace symmflow {
namespace {

using testing::usage_error_of;

Registry& reg() { return Registry::global(); }

TagSet tags_of(const std::string& op) { return reg().get(op).tags(); }


ShapeFn same_as_first() {
  return [](std::span<const Value> a) {
    return std::vector<TensorSpec>{{a[0].to_tensor().dtype(), a[0].to_tensor().shape()}};
  };
}

TEST(Tags, EverySymmMemOpWithAGroupIsCollective) {
  for (const OpDef* op : reg().ops("symm_mem")) {
    // stream_write_value32_ and memset32_ write a local u32 tensor: no group, no communication.
    const bool local = op->name() == "symm_mem::stream_write_value32_" ||
                       op->name() == "symm_mem::memset32_";
    EXPECT_EQ(op->has(Tag::collective), !local) << op->name();
    EXPECT_EQ(op->group_arg().empty(), local) << op->name();
    EXPECT_FALSE(op->has(Tag::pointwise)) << op->name();
  }
}

TEST(Tags, SymmMemOps) {
  using T = Tag;
  EXPECT_EQ(tags_of("symm_mem::put_signal"),
            (TagSet{T::collective, T::peer_written, T::one_sided, T::signal, T::in_place}));
  EXPECT_EQ(tags_of("symm_mem::wait_signal"),
            (TagSet{T::collective, T::peer_written, T::one_sided, T::signal, T::in_place}));
  EXPECT_EQ(tags_of("symm_mem::get"),
            (TagSet{T::collective, T::one_sided, T::peer_read, T::in_place}));
  EXPECT_EQ(tags_of("symm_mem::barrier"), (TagSet{T::collective, T::barrier}));
  EXPECT_EQ(tags_of("symm_mem::collective_permute_out"),
            (TagSet{T::collective, T::peer_written, T::out}));
  EXPECT_EQ(tags_of("symm_mem::one_shot_all_reduce"), TagSet{T::collective});
  EXPECT_EQ(tags_of("symm_mem::one_shot_all_reduce_out"), (TagSet{T::collective, T::out}));
  EXPECT_EQ(tags_of("symm_mem::two_shot_all_reduce_"),
            (TagSet{T::collective, T::peer_written, T::in_place}));
  EXPECT_EQ(tags_of("symm_mem::stream_write_value32_"), TagSet{T::in_place});
  EXPECT_EQ(tags_of("symm_mem::put_signal").str(),
            "collective, peer_written, one_sided, signal, in_place");
}

TEST(Tags, AtenOps) {
  using T = Tag;
  EXPECT_EQ(tags_of("aten::add.Tensor"), TagSet{T::pointwise});
  EXPECT_EQ(tags_of("aten::add_.Tensor"), (TagSet{T::pointwise, T::in_place}));
  EXPECT_EQ(tags_of("aten::add.out"), (TagSet{T::pointwise, T::out}));
  EXPECT_EQ(tags_of("aten::gelu.out"), (TagSet{T::pointwise, T::out}));
  EXPECT_EQ(tags_of("aten::relu_"), (TagSet{T::pointwise, T::in_place}));
  EXPECT_EQ(tags_of("aten::view"), TagSet{T::view});
  EXPECT_EQ(tags_of("aten::mm"), TagSet{});
  EXPECT_EQ(tags_of("aten::mm.out"), TagSet{T::out});
  EXPECT_EQ(tags_of("aten::copy_"), TagSet{T::in_place});
  EXPECT_EQ(TagSet{}.str(), "");
}

TEST(Tags, FusiblePointwiseOpsAreTheFunctionalPointwiseOnes) {
  std::vector<std::string> fusible;
  for (const OpDef* op : reg().ops("aten")) {
    if (passes::is_fusible_pointwise(*op)) fusible.push_back(op->name());
  }
  EXPECT_EQ(fusible, (std::vector<std::string>{
                         "aten::_to_copy",  // Note [fused casts and broadcasts]
                         "aten::add.Scalar", "aten::add.Tensor", "aten::cos", "aten::div.Scalar",
                         "aten::div.Tensor", "aten::exp", "aten::gelu", "aten::mul.Scalar",
                         "aten::mul.Tensor", "aten::neg",
                         "aten::pow.Tensor_Scalar",  // the backward's chains (pointwise.cpp)
                         "aten::reciprocal", "aten::relu", "aten::rsqrt", "aten::rsub.Scalar",
                         "aten::sigmoid", "aten::silu", "aten::sin", "aten::sub.Scalar",
                         "aten::sub.Tensor", "aten::tanh"}));
}

TEST(Tags, VariantLinksAsHandles) {
  const OpDef& mm = reg().get("aten::mm");
  ASSERT_NE(mm.out_op(), nullptr);
  EXPECT_EQ(mm.out_op(), &reg().get("aten::mm.out"));
  EXPECT_EQ(mm.out_op()->functional_op(), &mm);
  EXPECT_EQ(mm.functional_op(), nullptr);
  EXPECT_EQ(reg().get("symm_mem::barrier").out_op(), nullptr);
}

TEST(Tags, DeclaredThroughDefAndTag) {
  Library m(reg(), "t_tags");
  m.def("twice(Tensor x) -> Tensor", same_as_first(), {Tag::pointwise});
  m.def("pull(Tensor x, str group_name) -> Tensor", same_as_first());
  m.tag("pull", {Tag::one_sided, Tag::peer_read});
  EXPECT_EQ(tags_of("t_tags::twice"), TagSet{Tag::pointwise});
  EXPECT_EQ(tags_of("t_tags::pull"), (TagSet{Tag::collective, Tag::one_sided, Tag::peer_read}));
  m.tag("pull", {Tag::signal});  // tags add up
  EXPECT_TRUE(reg().get("t_tags::pull").has(Tag::signal));
}

TEST(Tags, Refusals) {
  Library m(reg(), "t_tagbad");
  m.def("f_(Tensor(a!) x) -> ()");
  EXPECT_EQ(usage_error_of([&] { m.tag("f_", {Tag::in_place}); }),
            "op 't_tagbad::f_': tag in_place is inferred (from the schema's alias annotations, "
            "its group argument and its symm args) and cannot be declared");
  EXPECT_EQ(usage_error_of([&] { m.tag("f_", {Tag::one_sided}); }),
            "op 't_tagbad::f_': tag one_sided needs a group argument, but the schema has no 'str "
            "group_name' (name another one with register_group_arg first)");
  EXPECT_EQ(usage_error_of([&] { m.tag("nope", {Tag::pointwise}); }),
            "op 't_tagbad::nope' is not defined");
  // A def whose tags are refused leaves the registry unchanged.
  EXPECT_EQ(usage_error_of([&] { m.def("g(Tensor x) -> Tensor", same_as_first(), {Tag::collective}); }),
            "op 't_tagbad::g': tag collective is inferred (from the schema's alias annotations, "
            "its group argument and its symm args) and cannot be declared");
  EXPECT_EQ(reg().find("t_tagbad::g"), nullptr);
  EXPECT_TRUE(reg().overloads("t_tagbad::g").empty());
  m.def("g(Tensor x) -> Tensor", same_as_first());  // the name is free again
  EXPECT_TRUE(reg().get("t_tagbad::f_").has(Tag::in_place));
}

// fuse_pointwise asks the pointwise tag: a new op tagged pointwise fuses with aten ones.
TEST(Tags, FusePointwiseFollowsTheTag) {
  Library m(reg(), "t_tagfuse");
  m.def("twice(Tensor x) -> Tensor", same_as_first(), {Tag::pointwise});
  m.def("thrice(Tensor x) -> Tensor", same_as_first());
  auto fused_ops = [](const std::string& op) {
    auto g = ir::parse_graph(fmt::format(R"sf(graph g(x: f32[8]) {{
  a = {}(x)
  b = aten::neg(a)
  return b
}})sf",
                                         op));
    passes::fuse_pointwise(*g);
    size_t n = 0;
    for (const ir::Node* node : g->nodes()) n += node->kind() == ir::NodeKind::fused;
    return n;
  };
  EXPECT_EQ(fused_ops("t_tagfuse::twice"), 1u);
  EXPECT_EQ(fused_ops("t_tagfuse::thrice"), 0u);
}

}  // namespace
}  // namespace symmflow

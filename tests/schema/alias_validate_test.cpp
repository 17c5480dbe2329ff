// analyze_aliases on functional, in-place, out, view and multi-out schemas; validate_schema
// accepting good schemas and rejecting each bad case with its exact message.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "symmflow/schema/schema.hpp"

namespace symmflow {
namespace {

using Ints = std::vector<int>;

AliasAnalysis analyze(const std::string& text) {
  return analyze_aliases(parse_schema(text));
}

TEST(AliasTest, Functional) {
  AliasAnalysis a =
      analyze("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  EXPECT_EQ(a.written_args, Ints{});
  EXPECT_EQ(a.out_args, Ints{});
  EXPECT_EQ(a.returns_alias, Ints{-1});
  EXPECT_FALSE(a.is_mutable());
  EXPECT_FALSE(a.is_out_variant());
  EXPECT_FALSE(a.is_view());
}

TEST(AliasTest, InPlace) {
  AliasAnalysis a =
      analyze("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)");
  EXPECT_EQ(a.written_args, Ints{0});
  EXPECT_EQ(a.out_args, Ints{});
  EXPECT_EQ(a.returns_alias, Ints{0});
  EXPECT_TRUE(a.is_mutable());
  EXPECT_FALSE(a.is_view());

  AliasAnalysis symm = analyze(
      "symm_mem::two_shot_all_reduce_(Tensor(a!) input, str reduce_op, "
      "str group_name) -> ()");
  EXPECT_EQ(symm.written_args, Ints{0});
  EXPECT_EQ(symm.returns_alias, Ints{});
  EXPECT_FALSE(symm.is_out_variant());

  AliasAnalysis foreach_ = analyze(
      "aten::_foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()");
  EXPECT_EQ(foreach_.written_args, Ints{0});
}

TEST(AliasTest, OutVariants) {
  AliasAnalysis add = analyze(
      "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)");
  EXPECT_EQ(add.written_args, Ints{3});
  EXPECT_EQ(add.out_args, Ints{3});
  EXPECT_EQ(add.returns_alias, Ints{3});
  EXPECT_TRUE(add.is_out_variant());
  EXPECT_FALSE(add.is_view());

  AliasAnalysis sum = analyze(
      "aten::sum.IntList_out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? "
      "dtype=None, Tensor(a!) out) -> Tensor(a!)");
  EXPECT_EQ(sum.out_args, Ints{4});

  AliasAnalysis one_shot = analyze(
      "symm_mem::one_shot_all_reduce_out(Tensor input, str reduce_op, str group_name, Tensor(a!) "
      "out) -> ()");
  EXPECT_EQ(one_shot.out_args, Ints{3});
  EXPECT_EQ(one_shot.written_args, Ints{3});

  AliasAnalysis two_shot = analyze(
      "symm_mem::two_shot_all_reduce_out(Tensor(a!) input, str reduce_op, str group_name, "
      "Tensor(b!) output) -> ()");
  EXPECT_EQ(two_shot.out_args, Ints{3});
  EXPECT_EQ(two_shot.written_args, (Ints{0, 3}));

  AliasAnalysis list_out = analyze(
      "aten::_foreach_add.List_out(Tensor[] self, Tensor[] other, *, Scalar alpha=1, Tensor(a!)[] "
      "out) -> ()");
  EXPECT_EQ(list_out.out_args, Ints{3});
}

TEST(AliasTest, MultiOut) {
  AliasAnalysis a = analyze(
      "aten::aminmax.out(Tensor self, *, int? dim=None, bool keepdim=False, Tensor(a!) min, "
      "Tensor(b!) max) -> (Tensor(a!) min, Tensor(b!) max)");
  EXPECT_EQ(a.written_args, (Ints{3, 4}));
  EXPECT_EQ(a.out_args, (Ints{3, 4}));
  EXPECT_EQ(a.returns_alias, (Ints{3, 4}));
  EXPECT_FALSE(a.is_view());

  // Not named as an out variant: written args, but no out args.
  AliasAnalysis dim_max = analyze(
      "aten::max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) "
      "max_values) -> (Tensor(a!) values, Tensor(b!) indices)");
  EXPECT_EQ(dim_max.written_args, (Ints{3, 4}));
  EXPECT_EQ(dim_max.out_args, Ints{});

  AliasAnalysis vdev = analyze(
      "symm_mem::all_to_all_vdev(Tensor input, Tensor(a!) out, Tensor in_splits, Tensor(a!) "
      "out_splits_offsets, str group_name) -> ()");
  EXPECT_EQ(vdev.written_args, (Ints{1, 3}));
  EXPECT_EQ(vdev.out_args, Ints{});
}

TEST(AliasTest, OutArgsAreTheTrailingWrittenRun) {
  // The written arg is not last: an out-named op without out args.
  EXPECT_EQ(analyze("foo_out(Tensor(a!) x, int n) -> ()").out_args, Ints{});
  // Only the trailing run counts.
  EXPECT_EQ(analyze("foo.out(Tensor(a!) x, int n, Tensor(b!) y, Tensor(c!) z) -> ()").out_args,
            (Ints{2, 3}));
  // A written non-Tensor arg (invalid, but analysis must not care) ends the run.
  EXPECT_EQ(analyze("foo.out(Tensor(b!) y, int(a!) z) -> ()").out_args, Ints{});
}

TEST(AliasTest, Views) {
  AliasAnalysis slice = analyze(
      "aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt "
      "step=1) -> Tensor(a)");
  EXPECT_EQ(slice.returns_alias, Ints{0});
  EXPECT_TRUE(slice.is_view());
  EXPECT_FALSE(slice.is_mutable());

  AliasAnalysis split = analyze(
      "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]");
  EXPECT_EQ(split.returns_alias, Ints{0});
  EXPECT_TRUE(split.is_view());

  AliasAnalysis t = analyze("aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)");
  EXPECT_TRUE(t.is_view());

  // Sets after `->` link too; the wildcard links nothing.
  EXPECT_EQ(analyze("f(Tensor(a -> b) x) -> Tensor(b)").returns_alias, Ints{0});
  EXPECT_EQ(analyze("f(Tensor(a) x) -> Tensor(*)").returns_alias, Ints{-1});
  EXPECT_EQ(analyze("f(Tensor x, Tensor(a|b) y) -> (Tensor(b), Tensor)").returns_alias,
            (Ints{1, -1}));
}

TEST(AliasTest, OutVariantNames) {
  EXPECT_TRUE(is_out_variant_name(parse_schema("aten::add.out(Tensor(a!) out) -> ()")));
  EXPECT_TRUE(is_out_variant_name(parse_schema("aten::sum.IntList_out(Tensor(a!) out) -> ()")));
  EXPECT_TRUE(is_out_variant_name(parse_schema("one_shot_all_reduce_out(Tensor(a!) out) -> ()")));
  EXPECT_FALSE(is_out_variant_name(parse_schema("aten::add.Tensor(Tensor x) -> ()")));
  EXPECT_FALSE(is_out_variant_name(parse_schema("aten::output(Tensor x) -> ()")));
  EXPECT_FALSE(is_out_variant_name(parse_schema("aten::foo.outer(Tensor x) -> ()")));
}

std::optional<std::string> validate(const std::string& text) {
  return validate_schema(parse_schema(text));
}

TEST(ValidateTest, AcceptsGoodSchemas) {
  EXPECT_EQ(validate("good_(Tensor(a!) x) -> ()"), std::nullopt);
  EXPECT_EQ(validate("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"),
            std::nullopt);
  EXPECT_EQ(validate("aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)"), std::nullopt);
  EXPECT_EQ(
      validate(
          "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]"),
      std::nullopt);
  EXPECT_EQ(validate("aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, "
                     "Tensor indices)"),
            std::nullopt);
  EXPECT_EQ(validate("f(Tensor x) -> Tensor(*)"), std::nullopt);
  EXPECT_EQ(validate("f(Tensor(a!) x, Tensor y) -> Tensor"), std::nullopt);
  EXPECT_EQ(validate("f(Tensor(a!) x, Tensor(b) y) -> Tensor(b)"), std::nullopt);
}

TEST(ValidateTest, RejectsMutatingOpReturningAlias) {
  EXPECT_EQ(validate("bad_(Tensor(a!) x) -> Tensor(a!)"),
            "op 'bad_': argument 'x' is mutated (a!) and also returned as an alias; a mutating "
            "op must return () or fresh tensors");
  // A read alias of the mutated set is still an alias of it.
  EXPECT_EQ(validate("my::bad_(Tensor y, Tensor(a!) x) -> (Tensor, Tensor(a))"),
            "op 'my::bad_': argument 'x' is mutated (a!) and also returned as an alias; a mutating "
            "op must return () or fresh tensors");
  // PyTorch's own out overloads return the out alias, which symmflow's rule refuses.
  EXPECT_EQ(validate("aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) "
                     "-> Tensor(a!)"),
            "op 'aten::add.out': argument 'out' is mutated (a!) and also returned as an alias; a "
            "mutating op must return () or fresh tensors");
}

TEST(ValidateTest, RejectsDuplicateNames) {
  EXPECT_EQ(validate("f(Tensor x, int x) -> ()"), "op 'f': duplicate argument name 'x'");
  EXPECT_EQ(validate("ns::f.o(Tensor x, *, int y, str y) -> ()"),
            "op 'ns::f.o': duplicate argument name 'y'");
  EXPECT_EQ(validate("f(Tensor x) -> (Tensor a, Tensor a)"), "op 'f': duplicate return name 'a'");
}

TEST(ValidateTest, RejectsUnknownReturnAliasSet) {
  EXPECT_EQ(validate("f(Tensor(a) x) -> Tensor(b)"),
            "op 'f': return 0 has alias annotation (b) but no argument has alias set 'b'");
  EXPECT_EQ(validate("f(Tensor x) -> (Tensor, Tensor(a|*))"),
            "op 'f': return 1 has alias annotation (a|*) but no argument has alias set 'a'");
}

TEST(ValidateTest, RejectsAliasOnNonTensor) {
  EXPECT_EQ(validate("f(int(a) n) -> ()"),
            "op 'f': argument 'n' of type 'int' has alias annotation (a); only Tensor types may "
            "carry alias annotations");
  EXPECT_EQ(validate("f(Tensor(a) x) -> int(a)[]"),
            "op 'f': return 0 of type 'int[]' has alias annotation (a); only Tensor types may "
            "carry alias annotations");
}

// Note [list returns]: one result per element, each aliasing what the list aliases.
TEST(AliasTest, ListReturnResults) {
  AliasAnalysis split = analyze(
      "aten::split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> "
      "Tensor(a)[]");
  EXPECT_TRUE(split.list_return);
  for (size_t r : {0, 1, 5}) EXPECT_EQ(split.output_alias(r), 0) << r;
  EXPECT_EQ(split.output_count(0), 0u);
  EXPECT_EQ(split.output_count(7), 7u);
  AliasAnalysis fresh = analyze("f(Tensor x, int n) -> Tensor[]");
  EXPECT_TRUE(fresh.list_return);
  EXPECT_EQ(fresh.output_alias(3), -1);
  // Fixed returns: one result each; past them (a functional node's new values) nothing aliases.
  AliasAnalysis ln = analyze(
      "aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? "
      "bias, float eps) -> (Tensor, Tensor, Tensor)");
  EXPECT_FALSE(ln.list_return);
  EXPECT_EQ(ln.output_count(5), 3u);
  EXPECT_EQ(ln.output_alias(2), -1);
  AliasAnalysis view = analyze("aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)");
  EXPECT_EQ(view.output_alias(0), 0);
  EXPECT_EQ(view.output_alias(1), -1);
}

TEST(ValidateTest, ListReturnRules) {
  EXPECT_EQ(validate("f(Tensor(a) x) -> Tensor(a)[]"), std::nullopt);
  EXPECT_EQ(validate("f(Tensor x) -> Tensor[]"), std::nullopt);
  EXPECT_EQ(validate("f(Tensor x) -> (Tensor[], Tensor)"),
            "op 'f': return 0 is a list ('Tensor[]') beside other returns; a list return must be "
            "the op's only return");
  EXPECT_EQ(validate("f(Tensor x) -> int[]"),
            "op 'f': return 0 has type 'int[]'; a list return must be 'Tensor[]'");
  EXPECT_EQ(validate("f(Tensor x) -> Tensor?[]"),
            "op 'f': return 0 has type 'Tensor?[]'; a list return must be 'Tensor[]'");
  EXPECT_EQ(validate("f_(Tensor(a!) x) -> Tensor[]"),
            "op 'f_': returns a list ('Tensor[]') and writes argument 'x'; a list return is only "
            "allowed on an op that writes no argument");
}

}  // namespace
}  // namespace symmflow

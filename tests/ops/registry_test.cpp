// Registration rules of the op registry, each accepted and rejected with its exact message.
#include <gtest/gtest.h>

#include "support/errors.hpp"
#include "symmflow/kernels/algorithm.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow {
namespace {

using testing::usage_error_of;


ShapeFn same_as_first() {
  return [](std::span<const Value> a) {
    return std::vector<TensorSpec>{{a[0].to_tensor().dtype(), a[0].to_tensor().shape()}};
  };
}

Registry& reg() {
  return Registry::global();
}

TEST(Registry, DefRecordsSchemaAndAliases) {
  OpDef& op = reg().def("t_def", "scale_(Tensor(a!) x, float s) -> ()", {});
  EXPECT_EQ(op.name(), "t_def::scale_");
  EXPECT_EQ(op.schema().str(), "t_def::scale_(Tensor(a!) x, float s) -> ()");
  EXPECT_TRUE(op.aliases().is_mutable());
  EXPECT_EQ(reg().find("t_def::scale_"), &op);
  EXPECT_EQ(reg().find("t_def::nope"), nullptr);
}

TEST(Registry, RejectsSecondDef) {
  reg().def("t_dup", "f(Tensor x) -> Tensor", same_as_first());
  EXPECT_EQ(usage_error_of([] { reg().def("t_dup", "f(Tensor y) -> Tensor", same_as_first()); }),
            "op 't_dup::f' is already defined");
}

TEST(Registry, RejectsMutatingOpReturningAlias) {
  std::string msg = usage_error_of([] { reg().def("t_alias", "bad_(Tensor(a!) x) -> Tensor(a!)", {}); });
  EXPECT_NE(msg.find("op 't_alias::bad_'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must return () or fresh tensors"), std::string::npos) << msg;
  EXPECT_EQ(reg().find("t_alias::bad_"), nullptr);
}

TEST(Registry, RejectsReturnsWithoutShapeFunction) {
  EXPECT_EQ(usage_error_of([] { reg().def("t_noshape", "f(Tensor x) -> Tensor", {}); }),
            "op 't_noshape::f' returns values but was defined without a shape function");
  EXPECT_EQ(reg().find("t_noshape::f"), nullptr);
}

TEST(Registry, RejectsSchemaOfOtherNamespace) {
  EXPECT_EQ(usage_error_of([] { reg().def("t_ns", "aten::f(Tensor x) -> ()", {}); }),
            "schema 'aten::f(Tensor x) -> ()' names namespace 'aten' inside library 't_ns'");
}

TEST(Registry, SymmArgsAreCheckedAgainstTheSchema) {
  reg().def("t_symm", "ar(Tensor x, Tensor[] xs, int n, str group_name) -> Tensor",
            same_as_first());
  EXPECT_EQ(usage_error_of([] { reg().register_symm_mem_args("t_symm::ar", {"y"}); }),
            "op 't_symm::ar': symm arg 'y' is not an argument of its schema (arguments: x, xs, n, "
            "group_name)");
  EXPECT_EQ(usage_error_of([] { reg().register_symm_mem_args("t_symm::ar", {"n"}); }),
            "op 't_symm::ar': symm arg 'n' has type int; only Tensor and Tensor[] arguments can be "
            "symmetric");
  EXPECT_EQ(usage_error_of([] {
              reg().register_symm_mem_args("t_symm::ar", {"x", "x"});
            }),
            "op 't_symm::ar': symm arg 'x' listed twice");
  EXPECT_TRUE(reg().get("t_symm::ar").symm_args().empty());
  reg().register_symm_mem_args("t_symm::ar", {"x", "xs"});
  EXPECT_EQ(reg().get("t_symm::ar").symm_args(), (std::vector<std::string>{"x", "xs"}));
  EXPECT_EQ(reg().get("t_symm::ar").group_arg(), "group_name");
}

TEST(Registry, SymmArgsNeedAGroupArgument) {
  reg().def("t_group", "nogroup(Tensor x) -> Tensor", same_as_first());
  EXPECT_EQ(usage_error_of([] { reg().register_symm_mem_args("t_group::nogroup", {"x"}); }),
            "op 't_group::nogroup': symm args x need a group argument, but the schema has no "
            "'str group_name' (name another one with register_group_arg first)");
  reg().def("t_group", "custom(Tensor x, str pg, int k) -> Tensor", same_as_first());
  EXPECT_EQ(usage_error_of([] { reg().register_group_arg("t_group::custom", "k"); }),
            "op 't_group::custom': group argument 'k' has type int; it must be str");
  EXPECT_EQ(usage_error_of([] { reg().register_group_arg("t_group::custom", "nope"); }),
            "op 't_group::custom': group argument 'nope' is not an argument of its schema "
            "(arguments: x, pg, k)");
  reg().register_group_arg("t_group::custom", "pg");
  reg().register_symm_mem_args("t_group::custom", {"x"});
  EXPECT_EQ(reg().get("t_group::custom").group_arg(), "pg");
}

TEST(Registry, ImplRules) {
  EXPECT_EQ(usage_error_of([] { reg().impl("t_impl::nope", Backend::cpu, [](KernelCall&) {}); }),
            "impl of undefined op 't_impl::nope' (def it first)");
  reg().def("t_impl", "k(Tensor x) -> ()", {});
  reg().impl("t_impl::k", Backend::cpu, [](KernelCall&) {});
  EXPECT_EQ(usage_error_of([] { reg().impl("t_impl::k", Backend::cpu, [](KernelCall&) {}); }),
            "op 't_impl::k' already has a cpu kernel");
  reg().impl("t_impl::k", Backend::cuda, [](KernelCall&) {});
  EXPECT_EQ(reg().get("t_impl::k").backends(), (std::vector<Backend>{Backend::cpu, Backend::cuda}));
}

TEST(Registry, UnknownOpSuggestsCloseNames) {
  EXPECT_EQ(usage_error_of([] { reg().get("symm_mem::one_shot_allreduce"); })
                .rfind("unknown op 'symm_mem::one_shot_allreduce' (did you mean "
                       "symm_mem::one_shot_all_reduce",
                       0),
            0u);
  EXPECT_EQ(usage_error_of([] { reg().get("zzzz::qqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"); }),
            "unknown op 'zzzz::qqqqqqqqqqqqqqqqqqqqqqqqqqqqqq'");
}

TEST(Registry, LinksFunctionalInplaceAndOutVariants) {
  reg().def("t_link", "mul.Tensor(Tensor self, Tensor other) -> Tensor", same_as_first());
  reg().def("t_link", "mul.Scalar(Tensor self, Scalar other) -> Tensor", same_as_first());
  reg().def("t_link", "mul_.Tensor(Tensor(a!) self, Tensor other) -> ()", {});
  reg().def("t_link", "mul.out(Tensor self, Tensor other, *, Tensor(a!) out) -> ()", {});
  reg().def("t_link",
            "zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None) -> Tensor",
            [](std::span<const Value>) { return std::vector<TensorSpec>{{}}; });
  reg().def("t_link", "zeros.out(SymInt[] size, *, Tensor(a!) out) -> ()", {});
  reg().def("t_link", "ring_(Tensor(a!) input, str group_name) -> ()", {});
  reg().def("t_link", "ring_out(Tensor(a!) input, str group_name, Tensor(b!) output) -> ()", {});
  reg().link_variants("t_link");
  const OpDef& mul = reg().get("t_link::mul.Tensor");
  EXPECT_EQ(mul.inplace_variant(), "t_link::mul_.Tensor");
  EXPECT_EQ(mul.out_variant(), "t_link::mul.out");
  EXPECT_EQ(mul.functional_variant(), "");
  EXPECT_EQ(reg().get("t_link::mul.out").functional_variant(), "t_link::mul.Tensor");
  EXPECT_EQ(reg().get("t_link::mul.out").inplace_variant(), "t_link::mul_.Tensor");
  EXPECT_EQ(reg().get("t_link::mul.Scalar").out_variant(), "");
  EXPECT_EQ(reg().get("t_link::zeros").out_variant(), "t_link::zeros.out");
  EXPECT_EQ(reg().get("t_link::ring_").out_variant(), "t_link::ring_out");
  EXPECT_EQ(reg().get("t_link::ring_out").inplace_variant(), "t_link::ring_");
}

TEST(Registry, RefusesMisnamedVariant) {
  reg().def("t_badlink", "f(Tensor x, int k) -> Tensor", same_as_first());
  reg().def("t_badlink", "f_out(Tensor x, float k, Tensor(a!) out) -> ()", {});
  EXPECT_EQ(usage_error_of([] { reg().link_variants("t_badlink"); }),
            "op 't_badlink::f_out' is named as a variant of 't_badlink::f' but their arguments "
            "differ:\n  t_badlink::f_out(Tensor x, float k, Tensor(a!) out) -> ()\n  "
            "t_badlink::f(Tensor x, int k) -> Tensor");
}

// An op's exchange is declared beside its definition, an out variant shares its functional op's,
// and explain's algorithm column (kernels::collective_algorithm) prints it with no entry elsewhere.
TEST(Registry, ExchangeIsDeclaredWithTheOpAndExplainPrintsIt) {
  reg().def("t_exch", "shift(Tensor x, str group_name) -> Tensor", same_as_first());
  reg().def("t_exch", "shift_out(Tensor x, str group_name, Tensor(a!) out) -> ()", {});
  reg().def("t_exch", "local(Tensor x) -> Tensor", same_as_first());
  reg().link_variants("t_exch");
  EXPECT_EQ(reg().get("t_exch::shift").exchange(), nullptr);
  EXPECT_EQ(usage_error_of([] { reg().exchange("t_exch::local", {"push", "x"}); }),
            "op 't_exch::local': an exchange needs a group argument, but the schema has no "
            "'str group_name' (name another one with register_group_arg first)");
  EXPECT_EQ(usage_error_of([] { reg().exchange("t_exch::shift", {"", "x"}); }),
            "op 't_exch::shift': an exchange needs an algorithm name and a description");
  EXPECT_EQ(usage_error_of([] { reg().exchange("t_exch::nope", {"push", "x"}); }),
            "op 't_exch::nope' is not defined");
  reg().exchange("t_exch::shift", {"push", "write into the next rank"});
  ASSERT_NE(reg().get("t_exch::shift_out").exchange(), nullptr);
  EXPECT_EQ(reg().get("t_exch::shift_out").exchange()->algorithm, "push");
  const kernels::AlgorithmChoice two = kernels::collective_algorithm("t_exch::shift_out", 64, 2);
  EXPECT_EQ(two.cpu, "push");
  EXPECT_EQ(two.cuda, "push");
  EXPECT_EQ(two.why, "write into the next rank");
  EXPECT_EQ(kernels::collective_algorithm("t_exch::shift", 64, 1).cpu, "local");
  EXPECT_EQ(kernels::collective_algorithm("t_exch::local", 64, 2).cpu, "");
  // The built-in ones are declared the same way (src/ops/symm_mem/defs.cpp).
  EXPECT_EQ(kernels::collective_algorithm("all_gather_out", 64, 4).cuda, "pull");
  EXPECT_EQ(kernels::collective_algorithm("symm_mem::fused_all_reduce_add_rms_norm_out", 64, 2).cpu,
            "one_shot+norm");
}

struct SymmRow {
  const char* op;
  std::vector<std::string> symm;
};

TEST(Catalogue, EverySymmMemOpOfOpsMdWithItsSymmArgs) {
  const std::vector<SymmRow> rows = {
      {"one_shot_all_reduce", {"input"}},
      {"one_shot_all_reduce_out", {"input"}},
      {"one_shot_all_reduce_copy", {"symm_buffer"}},
      {"one_shot_all_reduce_copy_out", {"symm_buffer"}},
      {"two_shot_all_reduce_", {"input"}},
      {"two_shot_all_reduce_out", {"input"}},
      {"multimem_all_reduce_", {"input"}},
      {"multimem_one_shot_all_reduce", {"input"}},
      {"multimem_one_shot_all_reduce_out", {"input"}},
      {"reduce_scatter_out", {"input"}},
      {"_low_contention_reduce_scatter", {"tensor"}},
      {"all_gather_out", {"input"}},
      {"_low_contention_all_gather", {"tensor"}},
      {"multimem_all_gather_out", {"out"}},
      {"all_to_all_vdev", {"input", "out", "in_splits", "out_splits_offsets"}},
      {"collective_permute", {}},
      {"collective_permute_out", {"out"}},
      {"put_signal", {"dst"}},
      {"wait_signal", {"dst"}},
      {"get", {"src"}},
      {"broadcast_", {"input"}},
      {"barrier", {}},
      {"stream_write_value32_", {}},
      {"memset32_", {}},
      {"fused_all_reduce_add_rms_norm", {"input"}},  // docs/ops.md (not in OPS.md)
      {"fused_all_reduce_add_rms_norm_out", {"input"}},
      {"reduce_out", {"input"}},  // docs/ops.md (not in OPS.md)
      {"all_to_all", {"input"}},  // docs/ops.md (not in OPS.md): Note [equal all-to-all]
      {"all_to_all_out", {"input"}},
      // docs/ops.md (not in OPS.md): Note [collective matmuls]
      {"fused_all_gather_matmul", {"A_shard"}},
      {"fused_matmul_reduce_scatter", {"partials"}},
  };
  EXPECT_EQ(reg().ops("symm_mem").size(), rows.size());
  for (const SymmRow& row : rows) {
    const OpDef& op = reg().get(std::string("symm_mem::") + row.op);
    EXPECT_EQ(op.symm_args(), row.symm) << row.op;
    for (const Return& r : op.schema().returns) EXPECT_FALSE(r.alias.has_value()) << row.op;
    // one_shot_all_reduce_copy writes its symm_buffer (a!) and returns a fresh tensor, which
    // DESIGN's rule allows (a deviation from OPS.md, which did not annotate the write);
    // fused_matmul_reduce_scatter writes its partials (a!) and returns a fresh tensor likewise.
    if (op.aliases().is_mutable() && std::string(row.op) != "one_shot_all_reduce_copy" &&
        std::string(row.op) != "fused_matmul_reduce_scatter") {
      EXPECT_TRUE(op.schema().returns.empty()) << row.op;
    }
  }
  EXPECT_EQ(reg().get("symm_mem::one_shot_all_reduce").out_variant(),
            "symm_mem::one_shot_all_reduce_out");
  EXPECT_EQ(reg().get("symm_mem::two_shot_all_reduce_").out_variant(),
            "symm_mem::two_shot_all_reduce_out");
  EXPECT_EQ(reg().get("symm_mem::two_shot_all_reduce_out").aliases().out_args, std::vector<int>{3});
  EXPECT_EQ(reg().get("symm_mem::all_to_all").out_variant(), "symm_mem::all_to_all_out");
}

// Note [kernel checks]: a backend check covers every kernel of its namespace on that backend,
// ops defined before it and after it alike, after the op's own check; other backends and ops
// without the backend's kernel are untouched.
TEST(Registry, BackendChecksCoverTheNamespacesKernels) {
  Kernel nop = [](KernelCall&) {};
  reg().def("t_bcheck", "before(Tensor x) -> Tensor", same_as_first());
  reg().impl("t_bcheck::before", Backend::cpu, nop);
  reg().backend_check("t_bcheck", Backend::cpu, [](const OpDef& op, std::span<const Value> args) {
    return args[0].to_tensor().dtype() == DType::i8 ? op.name() + ": no i8 here" : std::string();
  });
  reg().def("t_bcheck", "after(Tensor x) -> Tensor", same_as_first());
  reg().impl("t_bcheck::after", Backend::cpu, nop);
  reg().kernel_check("t_bcheck::after", Backend::cpu, [](const OpDef& op, std::span<const Value> a) {
    return a[0].to_tensor().dtype() == DType::boolean ? op.name() + ": its own check" : std::string();
  });
  std::vector<Value> i8{Tensor::meta({2}, DType::i8)}, f32{Tensor::meta({2}, DType::f32)};
  std::vector<Value> b{Tensor::meta({2}, DType::boolean)};
  EXPECT_EQ(reg().get("t_bcheck::before").kernel_refusal(Backend::cpu, i8), "t_bcheck::before: no i8 here");
  EXPECT_EQ(reg().get("t_bcheck::after").kernel_refusal(Backend::cpu, i8), "t_bcheck::after: no i8 here");
  EXPECT_EQ(reg().get("t_bcheck::after").kernel_refusal(Backend::cpu, b), "t_bcheck::after: its own check");
  EXPECT_EQ(reg().get("t_bcheck::after").kernel_refusal(Backend::cpu, f32), "");
  EXPECT_EQ(reg().get("t_bcheck::after").kernel_refusal(Backend::cuda, i8),
            "t_bcheck::after has no cuda kernel");
}

}  // namespace
}  // namespace symmflow

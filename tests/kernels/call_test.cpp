// The aten catalogue through symmflow::call: overload resolution by argument kinds, keyword
// arguments, defaults, schemas as defined, meta tensors in shape functions, and the typed
// wrappers of symmflow/ops/aten.hpp.
#include "symmflow/ops/registry.hpp"
#include "test_util.hpp"

namespace symmflow::test {
namespace {

TEST(AtenCall, OverloadResolution) {
  Tensor a = random_tensor({2, 3}, DType::f32, 1);
  Tensor b = random_tensor({3}, DType::f32, 2);
  Tensor t = call_t("aten::add", {a, b});
  expect_close(t, ref_binary(a, b, {2, 3}, [](double x, double y) { return x + y; }), DType::f32,
               "add -> add.Tensor");
  Tensor s = call_t("aten::add", {a, 2.5});
  expect_close(s, ref_binary(a, Tensor::full({}, DType::f64, 2.5), {2, 3},
                             [](double x, double y) { return x + y; }),
               DType::f32, "add -> add.Scalar");
  Tensor k = call_t("aten::add", {a, b}, {{"alpha", 2}});
  expect_close(k, ref_binary(a, b, {2, 3}, [](double x, double y) { return x + 2 * y; }), DType::f32,
               "add alpha kwarg");
  Tensor out = Tensor::empty({2, 3}, DType::f32);
  EXPECT_TRUE(call("aten::add", {a, b}, {{"out", out}}).is_none());  // add.out
  expect_close(out, t.to_doubles(), DType::f32, "add -> add.out");
  Tensor x = random_tensor({2, 3}, DType::f32, 3);
  EXPECT_NO_THROW(call("aten::sum", {x, std::vector<int64_t>{1}}));  // sum.dim_IntList
  EXPECT_EQ(call_t("aten::sum", {x, int64_t(1)}).shape(), (Shape{2}));  // int for int[1]?
  EXPECT_EQ(call_t("aten::slice", {x, int64_t(1)}, {{"start", 1}}).shape(), (Shape{2, 2}));
  expect_error([&] { call("aten::add", {a, "two"}); }, "no overload of 'aten::add' accepts these arguments");
}

TEST(AtenCall, SchemasAsDefined) {
  Registry& r = Registry::global();
  const char* schemas[] = {
      "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
      "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> ()",
      "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> ()",
      "aten::sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
      "aten::mul.out(Tensor self, Tensor other, *, Tensor(a!) out) -> ()",
      "aten::gelu(Tensor self, *, str approximate='none') -> Tensor",
      "aten::gelu.out(Tensor self, *, str approximate='none', Tensor(a!) out) -> ()",
      "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
      "aten::rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor",
      "aten::_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out) -> ()",
      "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
      "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> ()",
      "aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
      "aten::split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]",
      "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
      "aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
      "aten::index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
      "aten::index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, bool accumulate=False) -> ()",
      "aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)",
      "aten::cat.out(Tensor[] tensors, int dim=0, *, Tensor(a!) out) -> ()",
      "aten::full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
      "aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)",
      "aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)",
      "aten::pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
      "aten::amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
      "aten::squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)",
      "aten::constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor",
      "aten::scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
      "aten::slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? "
      "end=None, SymInt step=1) -> Tensor",
      "aten::_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
      "aten::rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
      "aten::clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
      "aten::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? "
      "attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool "
      "enable_gqa=False) -> Tensor",
  };
  for (const char* s : schemas) {
    FunctionSchema parsed = parse_schema(s);
    const OpDef& op = r.get(parsed.qualified_name());
    EXPECT_EQ(op.schema().str(), s);
    EXPECT_NE(op.kernel(Backend::cpu), nullptr) << s;
  }
  // Every aten op has a cpu kernel and a shape function where it returns something.
  for (const OpDef* op : r.ops("aten")) {
    EXPECT_NE(op->kernel(Backend::cpu), nullptr) << op->name();
    if (!op->schema().returns.empty()) {
      EXPECT_TRUE(op->has_shape_fn()) << op->name();
    }
  }
  EXPECT_EQ(r.ops("aten").size(), 138u);
}

TEST(AtenCall, ShapeFunctionsOnMetaTensors) {
  Registry& r = Registry::global();
  auto specs = [&](const char* op, const std::vector<Value>& args, const KwArgs& kw = {}) {
    const OpDef& def = r.get(op);
    std::vector<Value> bound = bind_args(def, args, kw);
    return def.shape_fn()(bound);
  };
  Tensor a = Tensor::meta({16, 4096}, DType::bf16), w = Tensor::meta({4096, 1024}, DType::bf16);
  EXPECT_EQ(specs("aten::mm", {a, w})[0], (TensorSpec{DType::bf16, {16, 1024}}));
  EXPECT_EQ(specs("aten::add.Tensor", {Tensor::meta({3, 1}, DType::i32), Tensor::meta({4}, DType::f16)})[0],
            (TensorSpec{DType::f16, {3, 4}}));
  EXPECT_EQ(specs("aten::sum.dim_IntList", {Tensor::meta({2, 3}, DType::i32), std::vector<int64_t>{0}, true})[0],
            (TensorSpec{DType::i64, {1, 3}}));
  Tensor tr = Tensor::meta({4, 6}, DType::f32, {1, 4});
  expect_error([&] { specs("aten::view", {tr, std::vector<int64_t>{24}}); },
               "aten::view: view size [24] is not compatible");
  EXPECT_EQ(specs("aten::reshape", {tr, std::vector<int64_t>{24}})[0], (TensorSpec{DType::f32, {24}}));
  EXPECT_TRUE(specs("aten::add.out", {a, a}, {{"out", Tensor::meta({16, 4096}, DType::f32)}}).empty());
  expect_error([&] { specs("aten::add.out", {a, a}, {{"out", Tensor::meta({16}, DType::f32)}}); },
               "aten::add.out: out has shape [16] but the result has shape [16, 4096]");
  expect_error([&] { specs("aten::mm", {a, a}); },
               "aten::mm: self has shape [16, 4096] and mat2 has shape [16, 4096]; inner dimensions "
               "4096 and 16 differ");
}

TEST(AtenWrappers, TypedEntryPoints) {
  Tensor a = random_tensor({3, 4}, DType::f32, 1), b = random_tensor({4}, DType::f32, 2);
  auto same = [](const Tensor& x, const Tensor& y, const char* what) {
    expect_close(x, y.to_doubles(), y.dtype(), what);
  };
  same(aten::add(a, b, 2), call_t("aten::add.Tensor", {a, b}, {{"alpha", 2}}), "add");
  same(aten::sub(a, b), call_t("aten::sub.Tensor", {a, b}), "sub");
  same(aten::mul(a, 3.0), call_t("aten::mul.Scalar", {a, 3.0}), "mul scalar");
  same(aten::div(a, b), call_t("aten::div.Tensor", {a, b}), "div");
  Tensor ints = random_tensor({4}, DType::i32, 3);
  EXPECT_EQ(aten::add(ints, ints, 2).dtype(), DType::i32);  // integral alpha travels as an int
  Tensor m = random_tensor({4, 5}, DType::f32, 4);
  same(aten::mm(a, m), call_t("aten::mm", {a, m}), "mm");
  same(aten::addmm(random_tensor({5}, DType::f32, 5), a, m, 0.5, 2),
       call_t("aten::addmm", {random_tensor({5}, DType::f32, 5), a, m}, {{"beta", 0.5}, {"alpha", 2}}),
       "addmm");
  Tensor x3 = random_tensor({2, 3, 4}, DType::f32, 6), y3 = random_tensor({2, 4, 2}, DType::f32, 7);
  same(aten::bmm(x3, y3), call_t("aten::bmm", {x3, y3}), "bmm");
  same(aten::sin(a), call_t("aten::sin", {a}), "sin");
  same(aten::cos(a), call_t("aten::cos", {a}), "cos");
  same(aten::exp(a), call_t("aten::exp", {a}), "exp");
  same(aten::tanh(a), call_t("aten::tanh", {a}), "tanh");
  same(aten::relu(a), call_t("aten::relu", {a}), "relu");
  same(aten::gelu(a, "tanh"), call_t("aten::gelu", {a}, {{"approximate", "tanh"}}), "gelu");
  same(aten::silu(a), call_t("aten::silu", {a}), "silu");
  same(aten::sigmoid(a), call_t("aten::sigmoid", {a}), "sigmoid");
  same(aten::neg(a), call_t("aten::neg", {a}), "neg");
  same(aten::rms_norm(a, {4}, b, 1e-6), call_t("aten::rms_norm", {a, std::vector<int64_t>{4}, b, 1e-6}), "rms_norm");
  same(aten::softmax(a, -1), call_t("aten::_softmax", {a, int64_t(-1), false}), "softmax");
  same(aten::sum(a, {1}), call_t("aten::sum.dim_IntList", {a, std::vector<int64_t>{1}}), "sum");
  EXPECT_EQ(aten::sum(ints).dtype(), DType::i64);
  same(aten::mean(a, {0}, true), call_t("aten::mean.dim", {a, std::vector<int64_t>{0}, true}), "mean");
  same(aten::clone(a), a, "clone");
  Tensor dst = Tensor::empty({3, 4}, DType::f64);
  expect_close(aten::copy_(dst, a), a.to_doubles(), DType::f64, "copy_");
  EXPECT_EQ(aten::view(a, {12}).storage(), a.storage());
  EXPECT_EQ(aten::reshape(a, {2, 6}).shape(), (Shape{2, 6}));
  EXPECT_EQ(aten::slice(a, 1, 1, std::nullopt, 2).shape(), (Shape{3, 2}));
  EXPECT_EQ(aten::t(a).shape(), (Shape{4, 3}));
  EXPECT_EQ(aten::transpose(x3, 0, 2).shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(aten::cat({a, a}, 1).shape(), (Shape{3, 8}));
  EXPECT_EQ(aten::zeros({2, 2}, DType::i8).to_doubles(), std::vector<double>(4, 0));
  EXPECT_EQ(aten::full({3}, 1.5, DType::f64).to_doubles(), std::vector<double>(3, 1.5));
}

}  // namespace
}  // namespace symmflow::test

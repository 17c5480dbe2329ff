// Deferred library registration through the macros, argument binding and eager dispatch.
#include <gtest/gtest.h>

#include "symmflow/ops/call.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow {
namespace {

std::vector<TensorSpec> like_x(std::span<const Value> a) {
  return {{a[0].to_tensor().dtype(), a[0].to_tensor().shape()}};
}

// out = x * a + b, element by element through doubles.
void affine_kernel(KernelCall& c) {
  const Tensor& x = c.arg("x").to_tensor();
  double a = c.arg("a").to_double(), b = c.arg("b").to_double();
  std::vector<double> xs = x.to_doubles();
  for (size_t i = 0; i < xs.size(); ++i) store_double(c.out(0).view(), int64_t(i), xs[i] * a + b);
}

void pick_tensor_kernel(KernelCall& c) {
  std::vector<double> ys = c.arg(1).to_tensor().to_doubles();
  for (size_t i = 0; i < ys.size(); ++i) store_double(c.out(0).view(), int64_t(i), ys[i]);
}

void pick_scalar_kernel(KernelCall& c) {
  for (int64_t i = 0; i < c.out(0).numel(); ++i) store_double(c.out(0).view(), i, c.arg(1).to_double());
}

void first_row_kernel(KernelCall& c) {  // a view: shares x's storage
  const Tensor& x = c.arg(0).to_tensor();
  c.outputs[0] = x.as_strided({x.size(1)}, {x.strides()[1]}, 0);
}

}  // namespace
}  // namespace symmflow

SYMMFLOW_LIBRARY(t_call, m) {
  using namespace symmflow;
  m.def("affine(Tensor x, float a, *, float b=0.5) -> Tensor", like_x);
  m.def("pick.Tensor(Tensor x, Tensor y) -> Tensor", like_x);
  m.def("pick.Scalar(Tensor x, Scalar y) -> Tensor", like_x);
  m.def("first_row(Tensor(a) x) -> Tensor(a)", [](std::span<const Value> a) {
    const Tensor& x = a[0].to_tensor();
    return std::vector<TensorSpec>{{x.dtype(), {x.size(1)}}};
  });
  m.def("nokernel(Tensor x) -> ()");
}

SYMMFLOW_LIBRARY_IMPL(t_call, cpu, m) {
  m.impl("affine", symmflow::affine_kernel);
  m.impl("pick.Tensor", symmflow::pick_tensor_kernel);
  m.impl("pick.Scalar", symmflow::pick_scalar_kernel);
  m.impl("first_row", symmflow::first_row_kernel);
}

namespace symmflow {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Call, MacrosRegisterOnFirstAccess) {
  const OpDef& op = Registry::global().get("t_call::affine");
  EXPECT_EQ(op.backends(), std::vector<Backend>{Backend::cpu});
}

TEST(Call, BindsDefaultsKeywordsAndPromotesInts) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3});
  Tensor y = call("t_call::affine", {x, 2}).to_tensor();  // int 2 for float a, default b
  EXPECT_EQ(y.to_doubles(), (std::vector<double>{2.5, 4.5, 6.5}));
  EXPECT_NE(y.raw_data(), x.raw_data());
  Tensor z = call("t_call::affine", {x, 1.0}, {{"b", -1.0}}).to_tensor();
  EXPECT_EQ(z.to_doubles(), (std::vector<double>{0, 1, 2}));
}

TEST(Call, ResolvesOverloadsFromArguments) {
  Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  Tensor y = Tensor::from_vector<float>({7, 8}, {2});
  EXPECT_EQ(call("t_call::pick", {x, y}).to_tensor().to_doubles(), (std::vector<double>{7, 8}));
  EXPECT_EQ(call("t_call::pick", {x, 3}).to_tensor().to_doubles(), (std::vector<double>{3, 3}));
  EXPECT_EQ(error_of([&] { call("t_call::pick", {x, "s"}); }),
            "no overload of 't_call::pick' accepts these arguments:\n"
            "  t_call::pick.Tensor(Tensor x, Tensor y) -> Tensor: t_call::pick.Tensor: argument "
            "'y' expects Tensor but got str ('s')\n"
            "  t_call::pick.Scalar(Tensor x, Scalar y) -> Tensor: t_call::pick.Scalar: argument "
            "'y' expects Scalar but got str ('s')");
}

TEST(Call, ViewsAliasTheirInput) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor r = call("t_call::first_row", {x}).to_tensor();
  EXPECT_EQ(r.raw_data(), x.raw_data());
  EXPECT_EQ(r.to_doubles(), (std::vector<double>{1, 2}));
}

TEST(Call, BindingErrorsNameOpAndArgument) {
  Tensor x = Tensor::from_vector<float>({1}, {1});
  EXPECT_EQ(error_of([&] { call("t_call::affine", {x}); }),
            "t_call::affine: missing argument 'a' (float)");
  EXPECT_EQ(error_of([&] { call("t_call::affine", {x, 1, 2}); }),
            "t_call::affine: takes 2 positional arguments but 3 were given");
  EXPECT_EQ(error_of([&] { call("t_call::affine", {x, 1}, {{"c", 1}}); }),
            "t_call::affine: unexpected keyword argument 'c'");
  EXPECT_EQ(error_of([&] { call("t_call::affine", {x, 1}, {{"a", 1}}); }),
            "t_call::affine: argument 'a' given twice");
  EXPECT_EQ(error_of([&] { call("t_call::affine", {x, None{}}); }),
            "t_call::affine: argument 'a' expects float but got None (None)");
  EXPECT_EQ(error_of([&] { call("t_call::affine", {Tensor(), 1}); }),
            "t_call::affine: argument 'x' is an undefined tensor");
  EXPECT_EQ(error_of([&] { call("t_call::nokernel", {x}); }),
            "op 't_call::nokernel' has no cpu kernel");
  EXPECT_EQ(error_of([&] { call("t_call::afine", {x}); }),
            "unknown op 't_call::afine' (did you mean t_call::affine?)");
}

// Note [launch records] (exec/executable.cpp): a record's slot takes each call's tensor without
// allocating (the shape and strides keep their capacity across release) and holds no storage
// between calls.
TEST(Value, SetTensorReusesTheSlotAndReleaseLetsTheStorageGo) {
  Tensor a = Tensor::empty({2, 3}, DType::f32), b = Tensor::empty({4, 5}, DType::f32);
  Value slot;
  slot.set_tensor(a);
  ASSERT_TRUE(slot.is_tensor());
  EXPECT_EQ(slot.to_tensor().raw_data(), a.raw_data());
  const int64_t* shape = slot.to_tensor().shape().data();
  const int64_t* strides = slot.to_tensor().strides().data();
  EXPECT_EQ(a.storage().use_count(), 2);
  slot.release_tensor();
  EXPECT_EQ(a.storage().use_count(), 1) << "a released slot still holds the storage";
  EXPECT_FALSE(slot.to_tensor().defined());
  slot.set_tensor(b);
  EXPECT_EQ(slot.to_tensor().raw_data(), b.raw_data());
  EXPECT_EQ(slot.to_tensor().shape(), (Shape{4, 5}));
  EXPECT_EQ(slot.to_tensor().strides(), (Strides{5, 1}));
  EXPECT_EQ(slot.to_tensor().shape().data(), shape) << "the shape was allocated again";
  EXPECT_EQ(slot.to_tensor().strides().data(), strides) << "the strides were allocated again";
  Value other(int64_t(3));
  other.set_tensor(a);  // a slot that held no tensor takes one
  EXPECT_EQ(other.to_tensor().raw_data(), a.raw_data());
  other.release_tensor();
  Value number(int64_t(7));
  number.release_tensor();  // not a tensor: unchanged
  EXPECT_EQ(number.to_int(), 7);
}

}  // namespace
}  // namespace symmflow

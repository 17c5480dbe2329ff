// index.Tensor, index_select, gather and cumsum on the CPU: every element against a naive
// reference computed here (negative indices, i32 and i64 indices, broadcast index tensors, None
// entries, adjacent and separated index dims, the transformers mask pattern), every dtype of
// cumsum with PyTorch's i64 promotion, and the error text of bad indices.
#include "test_util.hpp"

namespace symmflow::test {
namespace {

Tensor index_tensor(const std::vector<int64_t>& v, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < v.size(); ++i) store_double(t.view(), int64_t(i), double(v[i]));
  return t;
}

int64_t wrap(int64_t v, int64_t n) { return v < 0 ? v + n : v; }

TEST(AtenIndexing, IndexSelectEveryDimAndDtype) {
  uint32_t seed = 1;
  for (DType dtype : {DType::f32, DType::bf16, DType::i64, DType::boolean, DType::i8}) {
    for (DType itype : {DType::i64, DType::i32}) {
      Tensor self = random_tensor({3, 5, 7}, dtype, seed++, Layout::strided);
      std::vector<double> sv = self.to_doubles();
      for (int64_t dim : {0, 1, -1}) {
        int64_t d = dim < 0 ? dim + 3 : dim;
        int64_t n = self.shape()[size_t(d)];
        std::vector<int64_t> iv = {n - 1, 0, -1, 1, 0};
        Tensor index = index_tensor(iv, {5}, itype);
        Tensor got = call_t("aten::index_select", {self, dim, index});
        Shape shape = self.shape();
        shape[size_t(d)] = 5;
        ASSERT_EQ(got.shape(), shape);
        std::vector<double> want(size_t(numel(shape)));
        for (size_t i = 0; i < want.size(); ++i) {
          std::vector<int64_t> idx = unravel(int64_t(i), shape);
          idx[size_t(d)] = wrap(iv[size_t(idx[size_t(d)])], n);
          want[i] = sv[size_t((idx[0] * 5 + idx[1]) * 7 + idx[2])];
        }
        expect_close(got, want, dtype, fmt::format("index_select {} dim {}", dtype_name(dtype), dim));
      }
    }
  }
  Tensor s = random_tensor({4}, DType::f32, 9);
  expect_error([&] { call("aten::index_select", {s, int64_t(0), index_tensor({4}, {1}, DType::i64)}); },
               "aten::index_select: index 4 is out of bounds for dimension 0 with size 4");
  expect_error([&] { call("aten::index_select", {s, int64_t(0), Tensor::empty({1}, DType::f32)}); },
               "aten::index_select: index has dtype f32, which is not supported (expected i64 or i32)");
  expect_error([&] { call("aten::index_select", {s, int64_t(0), Tensor::empty({1, 1}, DType::i64)}); },
               "aten::index_select: index must be a vector (0-D or 1-D), got shape [1, 1]");
}

TEST(AtenIndexing, GatherAlongEachDim) {
  Tensor self = random_tensor({4, 6}, DType::f64, 20, Layout::transposed);
  std::vector<double> sv = self.to_doubles();
  for (int64_t dim : {0, 1}) {
    Shape ishape = {3, 5};  // smaller than self outside dim, as gather allows
    std::vector<int64_t> iv;
    std::mt19937 rng(21);
    for (int k = 0; k < 15; ++k) iv.push_back(int64_t(rng() % 4) - (dim == 0 ? 0 : 2));
    Tensor index = index_tensor(iv, ishape, DType::i64);
    Tensor got = call_t("aten::gather", {self, dim, index});
    ASSERT_EQ(got.shape(), ishape);
    std::vector<double> want(15);
    for (size_t i = 0; i < 15; ++i) {
      std::vector<int64_t> idx = unravel(int64_t(i), ishape);
      idx[size_t(dim)] = wrap(iv[i], self.shape()[size_t(dim)]);
      want[i] = sv[size_t(idx[0] * 6 + idx[1])];
    }
    expect_close(got, want, DType::f64, fmt::format("gather dim {}", dim));
  }
  expect_error([&] { call("aten::gather", {self, int64_t(1), Tensor::empty({4, 2}, DType::i32)}); },
               "aten::gather: index has dtype i32, which is not supported (expected i64)");
  expect_error([&] { call("aten::gather", {self, int64_t(1), Tensor::empty({5, 2}, DType::i64)}); },
               "aten::gather: index has shape [5, 2], which is larger than self's [4, 6] at dim 0");
  expect_error([&] { call("aten::gather", {self, int64_t(0), index_tensor({-5}, {1, 1}, DType::i64)}); },
               "aten::gather: index -5 is out of bounds for dimension 0 with size 4");
}

TEST(AtenIndexing, IndexTensorTransformersMaskPattern) {
  // mask[batch_idx[:, None, None, None], kv_idx[None, None, None, :]] on a 2-D bool mask.
  Tensor mask = random_tensor({3, 11}, DType::boolean, 30);
  std::vector<double> mv = mask.to_doubles();
  Tensor batch = index_tensor({2, 0}, {2, 1, 1, 1}, DType::i64);
  Tensor kv = index_tensor({0, 3, 10, -1, 5, 7, 1}, {1, 1, 1, 7}, DType::i64);
  Tensor got = call_t("aten::index.Tensor", {mask, std::vector<Tensor>{batch, kv}});
  ASSERT_EQ(got.shape(), (Shape{2, 1, 1, 7}));
  EXPECT_EQ(got.dtype(), DType::boolean);
  const int64_t b[] = {2, 0}, k[] = {0, 3, 10, 10, 5, 7, 1};
  std::vector<double> want;
  for (int64_t i : b) {
    for (int64_t j : k) want.push_back(mv[size_t(i * 11 + j)]);
  }
  expect_close(got, want, DType::boolean, "mask pattern");
}

TEST(AtenIndexing, IndexTensorWithNoneAndSeparatedDims) {
  Tensor self = random_tensor({4, 5, 6}, DType::f32, 40, Layout::strided);
  std::vector<double> sv = self.to_doubles();
  auto at = [&](int64_t i, int64_t j, int64_t k) { return sv[size_t((i * 5 + j) * 6 + k)]; };
  Tensor i1 = index_tensor({4, -2, 0}, {3}, DType::i32);  // over dim 1 (size 5)
  // x[:, i1]: None keeps dim 0; the index dims stay in place -> [4, 3, 6].
  Tensor a = call_t("aten::index.Tensor", {self, std::vector<Tensor>{Tensor(), i1}});
  ASSERT_EQ(a.shape(), (Shape{4, 3, 6}));
  std::vector<double> want;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j : {4, 3, 0})
      for (int64_t k = 0; k < 6; ++k) want.push_back(at(i, j, k));
  expect_close(a, want, DType::f32, "x[:, i1]");
  // x[i0, :, i2] with i0 [2, 1] and i2 [3] broadcasting to [2, 3]: separated -> [2, 3, 5].
  Tensor i0 = index_tensor({3, 1}, {2, 1}, DType::i64);
  Tensor i2 = index_tensor({5, 0, -1}, {3}, DType::i64);
  Tensor c = call_t("aten::index.Tensor", {self, std::vector<Tensor>{i0, Tensor(), i2}});
  ASSERT_EQ(c.shape(), (Shape{2, 3, 5}));
  want.clear();
  for (int64_t i : {3, 1})
    for (int64_t k : {5, 0, 5})
      for (int64_t j = 0; j < 5; ++j) want.push_back(at(i, j, k));
  expect_close(c, want, DType::f32, "x[i0, :, i2]");
  expect_error([&] { call("aten::index.Tensor", {self, std::vector<Tensor>{i0, i0, i0, i0}}); },
               "aten::index.Tensor: too many indices for a tensor of dimension 3 (got 4)");
  expect_error(
      [&] { call("aten::index.Tensor", {self, std::vector<Tensor>{Tensor::empty({4}, DType::boolean)}}); },
      "aten::index.Tensor: indices[0] is a bool mask, which is not supported");
  expect_error([&] { call("aten::index.Tensor", {self, std::vector<Tensor>{Tensor(), i2}}); },
               "aten::index.Tensor: index 5 is out of bounds for dimension 1 with size 5");
  expect_error(
      [&] { call("aten::index.Tensor", {self, std::vector<Tensor>{i0, index_tensor({0, 0, 0}, {1, 3}, DType::i64).as_strided({3}, {1}, 0), Tensor::empty({4}, DType::i64)}}); },
      "do not broadcast");
}

TEST(AtenIndexing, CumsumPromotesIntegersToI64) {
  uint32_t seed = 50;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::boolean, DType::i8}) {
    Tensor self = random_tensor({3, 13, 2}, dtype, seed++, Layout::transposed);
    std::vector<double> sv = self.to_doubles();
    for (int64_t dim : {1, -1, 0}) {
      Tensor got = call_t("aten::cumsum", {self, dim});
      DType want_dtype = is_floating(dtype) ? dtype : DType::i64;
      int64_t d = dim < 0 ? dim + 3 : dim;
      std::vector<double> want(sv.size()), scale(sv.size());
      for (size_t i = 0; i < sv.size(); ++i) {
        std::vector<int64_t> idx = unravel(int64_t(i), self.shape());
        double acc = 0, mag = 0;
        for (int64_t k = 0; k <= idx[size_t(d)]; ++k) {
          std::vector<int64_t> j = idx;
          j[size_t(d)] = k;
          double v = sv[size_t((j[0] * 13 + j[1]) * 2 + j[2])];
          acc += v;
          mag += std::abs(v);
        }
        want[i] = acc;
        scale[i] = mag;
      }
      expect_close(got, want, want_dtype, fmt::format("cumsum {} dim {}", dtype_name(dtype), dim),
                   scale);
    }
  }
  Tensor x = Tensor::from_vector<int32_t>({1, 2, 3}, {3});
  Tensor f = call_t("aten::cumsum", {x, int64_t(0)}, {{"dtype", DType::f32}});
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.to_doubles(), (std::vector<double>{1, 3, 6}));
  expect_error([&] { call("aten::cumsum", {x, int64_t(1)}); },
               "dim 1 out of range for a tensor of rank 1");
  EXPECT_EQ(call_t("aten::cumsum", {Tensor::empty({0, 4}, DType::f32), int64_t(0)}).numel(), 0);
}

}  // namespace
}  // namespace symmflow::test

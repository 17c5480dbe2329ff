// aten::index_put (meta_index_put.hpp) against a naive reference on every element: a bool mask
// over the leading dims (a 0-dim value of another dtype, values broadcast over the remaining dims
// with and without a leading 1, accumulate), a mask over every dim, integer index tensors (one, two
// broadcast against each other, a None entry, negative indices, repeated indices keeping the last
// value or summed with accumulate, i32 indices, a strided self; rows written as runs against an
// element walk); self is never written; the
// error texts of bad input. index_put_ writes the same elements into self itself, and refuses a
// mask.
#include "support/errors.hpp"
#include "test_util.hpp"

namespace symmflow::test {
namespace {

using testing::usage_error_of;

Tensor index_put(const Tensor& self, std::vector<Tensor> indices, const Tensor& values,
                 bool accumulate = false) {
  return call_t("aten::index_put", {self, indices, values, accumulate});
}

Tensor bools(const Shape& shape, const std::vector<int>& bits) {
  Tensor t = Tensor::empty(shape, DType::boolean);
  for (size_t i = 0; i < bits.size(); ++i) store_double(t.view(), int64_t(i), bits[i]);
  return t;
}

Tensor longs(const Shape& shape, const std::vector<int64_t>& v, DType dt = DType::i64) {
  Tensor t = Tensor::empty(shape, dt);
  for (size_t i = 0; i < v.size(); ++i) store_double(t.view(), int64_t(i), double(v[i]));
  return t;
}

TEST(AtenIndexPut, BoolMaskOverLeadingDims) {
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    Tensor x = random_tensor({2, 3, 4}, dt, 1);
    std::vector<double> before = x.to_doubles();
    Tensor mask = bools({2, 3}, {1, 0, 1, 0, 0, 1});
    // A 0-dim f32 value on any dtype (DTensor's masked zeros).
    Tensor y = index_put(x, {mask}, Tensor::full({}, DType::f32, 3));
    std::vector<double> want = before;
    for (int64_t r = 0; r < 6; ++r) {
      if (mask.to_doubles()[size_t(r)] != 0)
        for (int64_t j = 0; j < 4; ++j) want[size_t(r * 4 + j)] = 3;
    }
    expect_close(y, want, dt, fmt::format("index_put mask {}", dtype_name(dt)));
    EXPECT_EQ(x.to_doubles(), before) << "self is not written";
    // values over the remaining dims, with a leading 1, and accumulated.
    Tensor v = random_tensor({1, 4}, dt, 2);
    for (bool acc : {false, true}) {
      for (const Tensor& vals : {v, v.as_strided({4}, {1}, 0)}) {
        Tensor z = index_put(x, {mask}, vals, acc);
        std::vector<double> w = before, vv = v.to_doubles();
        for (int64_t r = 0; r < 6; ++r) {
          if (mask.to_doubles()[size_t(r)] == 0) continue;
          for (int64_t j = 0; j < 4; ++j) {
            double& e = w[size_t(r * 4 + j)];
            e = acc ? as_stored(e + vv[size_t(j)], dt) : vv[size_t(j)];
          }
        }
        expect_close(z, w, dt,
                     fmt::format("index_put mask {} values {} accumulate {}", dtype_name(dt),
                                 shape_str(vals.shape()), acc));
      }
    }
  }
  // A mask over every dim; a mask of one dim over a strided self.
  Tensor x = random_tensor({2, 3}, DType::f32, 3, Layout::transposed);
  Tensor full = bools({2, 3}, {0, 1, 1, 0, 0, 1});
  std::vector<double> want = x.to_doubles();
  for (size_t i = 0; i < 6; ++i) {
    if (full.to_doubles()[i] != 0) want[i] = -1;
  }
  expect_close(index_put(x, {full}, Tensor::full({}, DType::f32, -1)), want, DType::f32,
               "index_put mask over every dim");
  Tensor rows = bools({2}, {0, 1});
  want = x.to_doubles();
  for (size_t j = 3; j < 6; ++j) want[j] = 0;
  expect_close(index_put(x, {rows}, Tensor::full({}, DType::f32, 0)), want, DType::f32,
               "index_put row mask, transposed self");
}

TEST(AtenIndexPut, IntegerIndexTensors) {
  Tensor x = random_tensor({5, 3}, DType::f32, 4);
  const std::vector<double> before = x.to_doubles();
  // One index tensor (negative and repeated entries), rows of values broadcast.
  Tensor idx = longs({4}, {0, -1, 2, 0});
  Tensor v = random_tensor({4, 3}, DType::f32, 5);
  for (bool acc : {false, true}) {
    std::vector<double> want = before, vv = v.to_doubles();
    const int64_t rows[] = {0, 4, 2, 0};
    for (int k = 0; k < 4; ++k) {
      for (int j = 0; j < 3; ++j) {
        double& e = want[size_t(rows[k] * 3 + j)];
        e = acc ? as_stored(e + vv[size_t(k * 3 + j)], DType::f32) : vv[size_t(k * 3 + j)];
      }
    }
    expect_close(index_put(x, {idx}, v, acc), want, DType::f32,
                 fmt::format("index_put rows accumulate {}", acc));
  }
  // Two index tensors broadcast against each other, i32, one value for all.
  Tensor r = longs({2, 1}, {1, 3}, DType::i32), c = longs({2}, {0, 2}, DType::i32);
  std::vector<double> want = before;
  for (int64_t i : {1, 3}) {
    for (int64_t j : {0, 2}) want[size_t(i * 3 + j)] = 7;
  }
  expect_close(index_put(x, {r, c}, Tensor::full({}, DType::f32, 7)), want, DType::f32,
               "index_put two broadcast index tensors");
  // A None entry keeps dim 0: x[:, [2]] = values [5, 1].
  Tensor col = random_tensor({5, 1}, DType::f32, 6);
  want = before;
  for (int64_t i = 0; i < 5; ++i) want[size_t(i * 3 + 2)] = col.to_doubles()[size_t(i)];
  expect_close(index_put(x, {Tensor(), longs({1}, {2})}, col), want, DType::f32,
               "index_put None, then an index");
  EXPECT_EQ(x.to_doubles(), before) << "self is not written";
}

// Note [index runs]: rows indexed by one tensor (an embedding's gradient, the KV-cache update) are
// written as runs along the last dim. Against a naive element walk: self contiguous, transposed
// and strided (the run's stride is not 1), values full, broadcast along the run ([.., 1]) and over
// the leading dims, negative and repeated indices, set and accumulated (in row-major order:
// exact sums of the stored dtype), f32 and bf16; an empty run writes nothing.
TEST(AtenIndexPut, RunsAlongTheLastDimMatchTheElementWalk) {
  Tensor idx = longs({3, 4}, {0, -1, 2, 0, 6, 2, -7, 3, 5, 5, 1, 0});
  uint32_t seed = 20;
  for (DType dt : {DType::f32, DType::bf16}) {
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
      for (const Shape& vshape : {Shape{3, 4, 5}, Shape{3, 4, 1}, Shape{5}}) {
        Tensor self = random_tensor({7, 5}, dt, seed++, layout);
        Tensor v = random_tensor(vshape, dt, seed++);
        const std::vector<double> before = self.to_doubles(), vv = v.to_doubles();
        for (bool acc : {false, true}) {
          std::vector<double> want = before;
          for (int64_t a = 0; a < 3; ++a) {
            for (int64_t b = 0; b < 4; ++b) {
              const int64_t i = idx.to_doubles()[size_t(a * 4 + b)];
              const int64_t row = i < 0 ? i + 7 : i;
              for (int64_t j = 0; j < 5; ++j) {
                const size_t vi = vshape.size() == 1 ? size_t(j)
                                  : vshape[2] == 1   ? size_t(a * 4 + b)
                                                     : size_t((a * 4 + b) * 5 + j);
                double& e = want[size_t(row * 5 + j)];
                e = acc ? as_stored(e + vv[vi], dt) : vv[vi];
              }
            }
          }
          const std::string what = fmt::format("{} {} values {} accumulate {}", dtype_name(dt),
                                               layout_name(layout), shape_str(vshape), acc);
          EXPECT_EQ(index_put(self, {idx}, v, acc).to_doubles(), want) << what;
          EXPECT_EQ(self.to_doubles(), before) << what << ": self is not written";
        }
      }
    }
  }
  Tensor empty = Tensor::empty({3, 0}, DType::f32);
  EXPECT_EQ(index_put(empty, {longs({2}, {0, 2})}, Tensor::empty({2, 0}, DType::f32), true).numel(),
            0);
}

// index_put_ (Note [the KV cache in place]): the KV-cache update cache[:, pos] = k written into
// self, every element against index_put's result; other elements untouched; a mask refused.
TEST(AtenIndexPut, InPlaceWritesSelfAsIndexPutComputes) {
  Tensor cache = random_tensor({2, 6, 4}, DType::f32, 8);
  Tensor pos = longs({2}, {4, 1});
  Tensor k = random_tensor({2, 2, 4}, DType::f32, 9);
  Tensor rows = Tensor::empty({2, 1}, DType::i64);  // arange(2) viewed over dim 0
  store_double(rows.view(), 0, 0);
  store_double(rows.view(), 1, 1);
  for (bool acc : {false, true}) {
    Tensor self = random_tensor({2, 6, 4}, DType::f32, 8);  // cache's values
    const std::vector<double> want = index_put(cache, {rows, pos}, k, acc).to_doubles();
    call("aten::index_put_", {self, std::vector<Tensor>{rows, pos}, k, acc});
    EXPECT_EQ(self.to_doubles(), want) << "accumulate " << acc;
  }
  Tensor self = random_tensor({2, 6, 4}, DType::f32, 8);
  EXPECT_EQ(usage_error_of([&] {
              call("aten::index_put_", {self, std::vector<Tensor>{bools({2}, {1, 0})},
                                        Tensor::full({}, DType::f32, 0), false});
            }),
            "aten::index_put_: indices[0] is a bool mask, which is not supported (the result's shape "
            "would depend on its values; index with integer tensors)");
  EXPECT_EQ(self.to_doubles(), cache.to_doubles()) << "a refused call writes nothing";
}

TEST(AtenIndexPut, BadInputIsRefused) {
  Tensor x = random_tensor({2, 3}, DType::f32, 1);
  EXPECT_EQ(usage_error_of([&] { index_put(x, {longs({2}, {0, 1})}, longs({2, 3}, {1, 2, 3, 4, 5, 6})); }),
            "aten::index_put: Index put requires the source and destination dtypes match, got f32 "
            "for the destination and i64 for the source");
  EXPECT_EQ(usage_error_of([&] { index_put(x, {longs({2}, {0, 1})}, random_tensor({2, 2}, DType::f32, 2)); }),
            "aten::index_put: shape mismatch: value tensor of shape [2, 2] cannot be broadcast to "
            "indexing result of shape [2, 3]");
  EXPECT_EQ(usage_error_of([&] { index_put(x, {bools({3}, {1, 0, 1})}, Tensor::full({}, DType::f32, 0)); }),
            "aten::index_put: The shape of the mask [3] at index 0 does not match the shape of the "
            "indexed tensor [2, 3] at index 0");
  EXPECT_EQ(usage_error_of([&] { index_put(x, {bools({2}, {1, 1})}, random_tensor({2, 3}, DType::f32, 3)); }),
            "aten::index_put: values of shape [2, 3] for a bool mask index: one value per masked "
            "element is not supported (their count depends on the mask's values); values must "
            "broadcast to [3]");
  EXPECT_EQ(usage_error_of([&] {
              index_put(x, {bools({2}, {1, 1}), longs({1}, {0})}, Tensor::full({}, DType::f32, 0));
            }),
            "aten::index_put: a bool mask index is supported only as the one index (indices has 2 "
            "entries)");
  EXPECT_EQ(usage_error_of([&] { index_put(x, {longs({1}, {5})}, Tensor::full({}, DType::f32, 0)); }),
            "aten::index_put: index 5 is out of bounds for dimension 0 with size 2");
}

}  // namespace
}  // namespace symmflow::test

// dtypes, shapes, strides and host tensors.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "symmflow/core/tensor.hpp"

namespace symmflow {
namespace {

TEST(DType, NamesRoundTripAndTorchAliases) {
  for (DType t : kAllDTypes) {
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
    EXPECT_EQ(parse_dtype(dtype_torch_name(t)), t);
  }
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(parse_dtype("long"), DType::i64);
  EXPECT_EQ(parse_dtype("complex64"), std::nullopt);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
}

TEST(DType, PromotionFollowsPyTorch) {
  EXPECT_EQ(promote_types(DType::f16, DType::bf16), DType::f32);
  EXPECT_EQ(promote_types(DType::bf16, DType::f32), DType::f32);
  EXPECT_EQ(promote_types(DType::i64, DType::f16), DType::f16);
  EXPECT_EQ(promote_types(DType::i32, DType::i64), DType::i64);
  EXPECT_EQ(promote_types(DType::boolean, DType::i8), DType::i8);
  EXPECT_EQ(promote_types(DType::u32, DType::i32), DType::i64);
  EXPECT_EQ(promote_types(DType::f64, DType::f32), DType::f64);
}

TEST(Shape, StridesContiguityBroadcast) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({}), Strides{});
  EXPECT_TRUE(is_contiguous({2, 3}, {3, 1}));
  EXPECT_FALSE(is_contiguous({2, 3}, {1, 2}));
  EXPECT_TRUE(is_contiguous({2, 1, 3}, {3, 99, 1}));  // size-1 dims carry any stride
  EXPECT_TRUE(is_contiguous({0, 3}, {7, 7}));
  EXPECT_EQ(broadcast_shapes({4, 1, 3}, {2, 1}), (Shape{4, 2, 3}));
  EXPECT_EQ(numel({}), 1);
  EXPECT_EQ(numel({3, 0}), 0);
  EXPECT_EQ(wrap_dim(-1, 3), 2);
  try {
    broadcast_shapes({2, 3}, {4});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "shapes [2, 3] and [4] do not broadcast");
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
  }
  try {
    wrap_dim(3, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "dim 3 out of range for a tensor of rank 3 (expected [-3, 2])");
  }
}

TEST(Tensor, FromVectorStridedViewsAndContiguous) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.str(), "f32[2, 3]");
  EXPECT_TRUE(t.is_contiguous());
  Tensor tt = t.as_strided({3, 2}, {1, 3}, 0);  // transpose
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_doubles(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.raw_data(), t.raw_data());
  EXPECT_EQ(c.to_doubles(), tt.to_doubles());
  Tensor row1 = t.as_strided({3}, {1}, 3);
  EXPECT_EQ(row1.to_doubles(), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(t.size(-1), 3);
}

TEST(Tensor, MetaHasNoStorageAndDtypeChecks) {
  Tensor m = Tensor::meta({4, 5}, DType::bf16);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.device(), Device::meta());
  EXPECT_EQ(m.raw_data(), nullptr);
  Tensor f = Tensor::full({2}, DType::bf16, 1.5);
  EXPECT_EQ(f.to_doubles(), (std::vector<double>{1.5, 1.5}));
  try {
    f.data<float>();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tensor holds bf16, accessed as f32");
  }
  Tensor z = Tensor::empty({0, 3}, DType::f32);
  EXPECT_EQ(z.numel(), 0);
  EXPECT_TRUE(z.to_doubles().empty());
  EXPECT_THROW(Tensor::empty({-1}, DType::f32), Error);
  // Note [checked sizes]: bytes without overflow; a zero dimension makes any shape empty.
  EXPECT_EQ(checked_nbytes({3, 5}, DType::bf16, "t"), 30u);
  EXPECT_EQ(checked_nbytes({}, DType::f64, "t"), 8u);
  EXPECT_EQ(checked_nbytes({int64_t(1) << 62, int64_t(1) << 62, 0}, DType::f32, "t"), 0u);
  EXPECT_EQ(checked_nbytes({int64_t(1) << 60}, DType::f32, "t"), size_t(1) << 62);
  for (const Shape& huge : {Shape{(int64_t(1) << 60) + 1}, Shape{int64_t(1) << 40, int64_t(1) << 40},
                            Shape{int64_t(1) << 62, 4, 4}}) {
    try {
      Tensor::empty(huge, DType::f32);
      FAIL() << shape_str(huge);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
      EXPECT_EQ(std::string(e.what()),
                "empty: " + shape_str(huge) + " of f32 is more than 2^62 bytes (its size overflows)");
    }
  }
}

TEST(Tensor, GpuMemoryNeedsTheBackendAndStaysOffTheHost) {
  try {
    Tensor::empty({4}, DType::f32, Device::cuda(1));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "cannot allocate on cuda:1: the cuda backend is not loaded (link symmflow_cuda "
                 "and call symmflow::cuda::bind_device())");
  }
  // A tensor that claims GPU memory is never read on the host.
  float fake[4] = {};
  auto storage = std::make_shared<Storage>(fake, sizeof fake, Device::cuda(0), MemoryKind::regular);
  Tensor g = Tensor::from_storage(storage, 0, DType::f32, {4});
  try {
    g.to_doubles();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "to_doubles: tensor f32[4] is on cuda:0; copy it to the host first (aten::copy_ "
                 "into a host tensor)");
  }
  EXPECT_THROW(g.item_as_double(std::vector<int64_t>{0}), Error);
  EXPECT_THROW(g.as_strided({2}, {2}, 0).contiguous(), Error);
}

TEST(Tensor, StorageIsAlignedAndZeroed) {
  Tensor t = Tensor::empty({17}, DType::f64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  for (double v : t.to_doubles()) EXPECT_EQ(v, 0.0);
  EXPECT_FALSE(t.is_symmetric());
  EXPECT_EQ(t.view().storage, t.storage().get());
}

// Note [host block cache]: a freed block of a megabyte or more comes back for the next allocation
// of its size (not of another size), zero-filled when asked; sanitized builds cache nothing.
TEST(Storage, LargeHostBlocksAreReusedAndZeroed) {
  const size_t big = size_t(3) << 20;
  void* first = nullptr;
  {
    auto s = Storage::allocate_host(big);
    first = s->data();
    std::memset(first, 0x5a, big);
  }
  auto other = Storage::allocate_host(big + 64);  // another size: not the freed block
  EXPECT_NE(other->data(), first);
  auto again = Storage::allocate_host(big);
#if defined(SYMMFLOW_ASAN) || defined(SYMMFLOW_TSAN)
  (void)again;
#else
  EXPECT_EQ(again->data(), first);
#endif
  const auto* bytes = static_cast<const unsigned char*>(again->data());
  size_t nonzero = 0;
  for (size_t i = 0; i < big; ++i) nonzero += bytes[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(again->data()) % 64, 0u);
}

}  // namespace
}  // namespace symmflow

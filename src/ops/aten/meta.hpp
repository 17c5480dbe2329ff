// Shape and dtype logic of the aten ops ("meta functions"), shared by the shape functions of the
// ops layer and the kernels of every backend, so that both agree on result types and reject the
// same inputs with the same InvalidUsage messages ("aten::mm: self has shape ...").
// Everything here reads only dtype, shape and strides: tensors may be meta tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/core/tensor.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/ops/value.hpp"

namespace symmflow::aten_meta {

// ---- Type promotion (PyTorch's result_type) -----------------------------------------------------
enum class OperandKind { dim, zero_dim, scalar };
struct Operand {
  DType dtype;
  OperandKind kind;
};
Operand operand_of(const Tensor& t);
// A tensor or a Scalar (bool -> bool, int -> i64, float -> f32, the default dtype).
Operand operand_of(const Value& v);
// Category-aware promotion: a dimensioned tensor wins over 0-dim tensors and scalars of the same
// category (bool < integral < floating).
DType result_type(std::span<const Operand> operands);
// PyTorch's can_cast: no floating -> integral, no non-bool -> bool.
bool can_cast(DType from, DType to);

// ---- Argument helpers ---------------------------------------------------------------------------
// `int[1]?` / `int[]` arguments: None -> nullopt, an int -> {int}, a list -> the list.
std::optional<std::vector<int64_t>> opt_int_list(const Value& v);
// The sizes of a factory (`SymInt[] size`), checked non-negative.
Shape factory_size(std::string_view op, const Value& size);
// Checks that the out/in-place tensor `arg` can hold `spec`: same shape (no resizing), and a dtype
// that the result can be cast to (exactly `spec.dtype` when `exact_dtype`).
void check_out(std::string_view op, std::string_view arg, const Tensor& out, const TensorSpec& spec,
               bool exact_dtype = false);
// Throws "op: arg has dtype X, which is not supported (expected ...)" unless `ok`.
void check_dtype(bool ok, std::string_view op, std::string_view arg, DType dtype,
                 std::string_view expected);

// ---- Pointwise ----------------------------------------------------------------------------------
enum class BinaryOp { add, sub, mul, div };
enum class UnaryOp { sin, cos, exp, tanh, relu, gelu, silu, sigmoid, neg, rsqrt, reciprocal };
// Every UnaryOp, for the lists that register or recognize them all.
inline constexpr UnaryOp kAllUnaryOps[] = {UnaryOp::sin,  UnaryOp::cos,  UnaryOp::exp,
                                           UnaryOp::tanh, UnaryOp::relu, UnaryOp::gelu,
                                           UnaryOp::silu, UnaryOp::sigmoid, UnaryOp::neg,
                                           UnaryOp::rsqrt, UnaryOp::reciprocal};
const char* unary_name(UnaryOp op);
// Result of `self op other` (other a tensor or a Scalar), with alpha for add/sub (None otherwise).
TensorSpec binary_spec(std::string_view op, BinaryOp kind, const Tensor& self, const Value& other,
                       const Value& alpha);
TensorSpec unary_spec(std::string_view op, UnaryOp kind, const Tensor& self);
// gelu's `approximate`: false for 'none', true for 'tanh'; anything else is an error.
bool gelu_is_tanh(std::string_view op, const Value& approximate);
// pow.Tensor_Scalar: the result type of self ** exponent (PyTorch's promotion with a Scalar);
// floating results only (integral powers are refused, naming the dtype).
TensorSpec pow_scalar_spec(std::string_view op, const Tensor& self, const Value& exponent);

// ---- Matmul -------------------------------------------------------------------------------------
TensorSpec mm_spec(std::string_view op, const Tensor& self, const Tensor& mat2);
TensorSpec addmm_spec(std::string_view op, const Tensor& self, const Tensor& mat1,
                      const Tensor& mat2, const Value& beta, const Value& alpha);
TensorSpec bmm_spec(std::string_view op, const Tensor& self, const Tensor& mat2);

// ---- Reductions and norms -----------------------------------------------------------------------
struct ReduceInfo {
  TensorSpec spec;
  std::vector<bool> reduced;  // per input dim
  Shape keepdim_shape;        // the output shape with reduced dims kept as 1
  int64_t count = 1;          // elements reduced into each output
};
ReduceInfo reduce_info(std::string_view op, const Tensor& self, const Value& dim,
                       const Value& keepdim, const Value& dtype, bool is_mean);
struct RmsNormInfo {
  TensorSpec spec;
  int64_t inner = 1;  // numel(normalized_shape)
  double eps = 0;
};
RmsNormInfo rms_norm_info(std::string_view op, const Tensor& input, const Value& normalized_shape,
                          const Value& weight, const Value& eps);
struct SoftmaxInfo {
  TensorSpec spec;
  int64_t dim = 0;
  // self as a contiguous [outer, n, inner] block, softmax along n.
  int64_t outer = 1, n = 1, inner = 1;
};
// amax: reduce_info with the input's dtype kept; refuses bool and an empty reduced dim (PyTorch:
// "Expected reduction dim ... to have non-zero size").
ReduceInfo amax_info(std::string_view op, const Tensor& self, const Value& dim,
                     const Value& keepdim);
SoftmaxInfo softmax_info(std::string_view op, const Tensor& self, const Value& dim,
                         const Value& half_to_float);

// ---- Views and shape ops ------------------------------------------------------------------------
struct ViewGeometry {
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // elements, relative to the input's data
};
// Resolves one -1 and checks the element count.
Shape infer_size(std::string_view op, const std::vector<int64_t>& size, int64_t numel);
// Strides of a view with `new_shape` over (`shape`, `strides`), or nullopt when impossible.
std::optional<Strides> compute_view_strides(const Shape& shape, const Strides& strides,
                                            const Shape& new_shape);
ViewGeometry view_geometry(std::string_view op, const Tensor& self, const Value& size);
// nullopt strides when reshape must copy.
struct ReshapeGeometry {
  Shape shape;
  std::optional<Strides> strides;
};
ReshapeGeometry reshape_geometry(std::string_view op, const Tensor& self, const Value& shape);
ViewGeometry slice_geometry(std::string_view op, const Tensor& self, const Value& dim,
                            const Value& start, const Value& end, const Value& step);
ViewGeometry transpose_geometry(std::string_view op, const Tensor& self, int64_t dim0,
                                int64_t dim1);
ViewGeometry t_geometry(std::string_view op, const Tensor& self);
ViewGeometry permute_geometry(std::string_view op, const Tensor& self, const Value& dims);
// PyTorch's inferExpandGeometry: new leading dims and size-1 dims get stride 0; -1 keeps a size.
ViewGeometry expand_geometry(std::string_view op, const Tensor& self, const Value& size);
ViewGeometry unsqueeze_geometry(std::string_view op, const Tensor& self, const Value& dim);
struct CatInfo {
  TensorSpec spec;
  int64_t dim = 0;
  std::vector<bool> skipped;  // legacy 1-D empty inputs that take no part
};
CatInfo cat_info(std::string_view op, const std::vector<Tensor>& tensors, const Value& dim);
// copy_: src must broadcast to self's shape.
void check_copy(std::string_view op, const Tensor& self, const Tensor& src);

// ---- Embedding and attention (meta_attention.cpp) ---------------------------------------------
// embedding: weight [N, D] (floating), indices i32 or i64 of any shape -> indices.shape + [D].
TensorSpec embedding_spec(std::string_view op, const Tensor& weight, const Tensor& indices,
                          const Value& padding_idx, const Value& scale_grad_by_freq,
                          const Value& sparse);
// scaled_dot_product_attention over query [..., H, L, E], key [..., Hkv, S, E], value
// [..., Hkv, S, Ev] (the same leading dims, flattened to `batch`), out [..., H, L, Ev].
struct SdpaInfo {
  TensorSpec spec;
  int64_t batch = 1, heads = 1, kv_heads = 1, q_len = 0, kv_len = 0, head_dim = 0, v_dim = 0;
  bool causal = false;
  double scale = 1;
  // Note [attention masks] (meta_attention.cpp): the mask broadcasts to `scores_shape`,
  // [..., heads, q_len, kv_len].
  bool has_mask = false, mask_is_bool = false;
  Shape scores_shape;
};
SdpaInfo sdpa_info(std::string_view op, const Tensor& query, const Tensor& key,
                   const Tensor& value, const Value& attn_mask, const Value& dropout_p,
                   const Value& is_causal, const Value& scale, const Value& enable_gqa);
// scaled_dot_product_attention_backward (Note [attention backward] in meta_attention.cpp): the
// forward's checks, and grad_out with the forward result's shape and query's dtype.
SdpaInfo sdpa_backward_info(std::string_view op, const Tensor& grad_out, const Tensor& query,
                            const Tensor& key, const Tensor& value, const Value& attn_mask,
                            const Value& dropout_p, const Value& is_causal, const Value& scale,
                            const Value& enable_gqa);

// ---- Mask ops (meta_mask.cpp): what a decomposed causal attention mask uses -------------------
// arange.start_step: i64 when start, end and step are all ints (else f32) unless dtype= is given;
// `count` elements start + i * step.
struct ArangeInfo {
  TensorSpec spec;
  double start = 0, step = 1;
};
ArangeInfo arange_info(std::string_view op, const Value& start, const Value& end, const Value& step,
                       const Value& dtype);
// logical_and (broadcast) and logical_not: bool.
TensorSpec logical_spec(std::string_view op, const Tensor& self, const Tensor* other);
// where.self: condition (bool) broadcast with self and other; the promoted dtype of self and other.
TensorSpec where_spec(std::string_view op, const Tensor& condition, const Tensor& self,
                      const Tensor& other);

// The broadcast of two shapes, or "op: a_name with shape [..] and b_name with shape [..] do not
// broadcast".
Shape broadcast_checked(std::string_view op, const char* a_name, const Shape& a, const char* b_name,
                        const Shape& b);

// ---- Comparisons, bitwise and logical ops (meta_logic.cpp) ------------------------------------
// eq/ne/lt/le/gt/ge, .Tensor and .Scalar (other a Tensor or a Scalar): a bool result of the
// broadcast shape; both sides are compared in `compute`, PyTorch's result_type of the pair.
struct CompareInfo {
  TensorSpec spec;
  DType compute = DType::f32;
};
CompareInfo compare_info(std::string_view op, const Tensor& self, const Value& other);
// bitwise_and/or/xor (.Tensor, .Scalar) and bitwise_not (other None): the promoted type, which
// must be bool or an integer ("op: self has dtype f32, which is not supported (expected bool or an
// integer dtype)"; a float Scalar makes the result float and is refused the same way).
TensorSpec bitwise_spec(std::string_view op, const Tensor& self, const Value& other);

// ---- Indexing and scans (meta_index.cpp) --------------------------------------------------------
// Note [gather geometry]: index_select, gather and index.Tensor all read
//   out[i] = self_view[i] + sum_k index_k[i] * stride_k   (element offsets into self's storage)
// where i runs over out's shape, self_view is self seen over out's shape (stride 0 along the dims
// that an index supplies) and each index_k is an index tensor seen over out's shape (stride 0
// where it broadcasts). An index value v addresses self's dim `dim` of `size`: -size <= v < size,
// negative values wrap. Kernels of every backend follow this one description.
struct GatherIndex {
  Tensor index;  // i32 or i64, a view over out's shape
  int64_t dim = 0, size = 0, stride = 0;
};
struct GatherGeometry {
  TensorSpec spec;
  Tensor self;  // a view of self over out's shape
  std::vector<GatherIndex> indices;
};
// index_select(self, dim, index): index 1-D (or 0-D) i32/i64; out = self with size(dim) = numel.
GatherGeometry index_select_geometry(std::string_view op, const Tensor& self, const Value& dim,
                                     const Tensor& index);
// gather(self, dim, index): index i64 of self's rank, no larger than self outside dim; out has
// index's shape.
GatherGeometry gather_geometry(std::string_view op, const Tensor& self, const Value& dim,
                               const Tensor& index);
// index.Tensor(self, indices): PyTorch's advanced indexing with i32/i64 index tensors (None keeps
// a dim; bool masks are refused: their result shape depends on the data).
GatherGeometry index_geometry(std::string_view op, const Tensor& self, const Value& indices);
// The element `v` of an index, wrapped into [0, size), or "op: index v is out of bounds for
// dimension d with size n".
int64_t checked_index(std::string_view op, int64_t v, const GatherIndex& g);
// cumsum(self, dim, dtype): self's shape; dtype= if given, else i64 for bool and integer inputs,
// else self's dtype. The scan runs along `dim` of a contiguous [outer, n, inner] block.
struct CumsumInfo {
  TensorSpec spec;
  int64_t dim = 0, outer = 1, n = 1, inner = 1;
};
CumsumInfo cumsum_info(std::string_view op, const Tensor& self, const Value& dim,
                       const Value& dtype);

// ---- Definition helper --------------------------------------------------------------------------
// Bound arguments by name, with the qualified op name for messages.
class Args {
 public:
  Args(const std::string& op, const std::vector<std::string>& names, std::span<const Value> values)
      : op_(op), names_(names), values_(values) {}
  const Value& operator[](std::string_view name) const;
  const Tensor& tensor(std::string_view name) const { return (*this)[name].to_tensor(); }
  const std::string& op() const { return op_; }

 private:
  const std::string& op_;
  const std::vector<std::string>& names_;
  std::span<const Value> values_;
};
using MetaFn = std::function<std::vector<TensorSpec>(const Args&)>;
// m.def(schema, shape_fn) where shape_fn sees arguments by name.
void def(Library& m, std::string_view schema, MetaFn fn);

}  // namespace symmflow::aten_meta

// Argument resolution and validation of the cpu collectives (contract in args.hpp).
#include "kernels/cpu/collectives/args.hpp"

#include <algorithm>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "symmflow/core/error.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cpu {

namespace {
const std::shared_ptr<Group>& group_by_name(std::string_view op, std::string_view name) {
  Runtime& rt = Runtime::current();
  if (!rt.has_group(name)) {
    try {
      rt.group(name);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: {}", op, e.what()));
    }
  }
  return rt.group(name);
}

// What a launch record keeps (Note [prepared collectives]).
struct PreparedCollective {
  std::shared_ptr<Group> group;
  bool reduction = false;  // op and fn below are set, for `dtype`
  ReduceOp op = ReduceOp::sum;
  DType dtype = DType::f32;
  ReduceFn fn = nullptr;
};

PreparedCollective* prepared(const KernelCall& c, std::string_view op, size_t group_arg) {
  if (!c.state) return nullptr;
  if (!*c.state) {
    auto p = std::make_shared<PreparedCollective>();
    p->group = group_by_name(op, c.arg(group_arg).to_string());
    *c.state = std::move(p);
  }
  auto* p = static_cast<PreparedCollective*>(c.state->get());
  p->group->check_alive(op);
  return p;
}
}  // namespace

Group& resolve_group(std::string_view op, std::string_view name) {
  return *group_by_name(op, name);
}

Reduction prepare(std::string_view op, std::string_view reduce_op, std::string_view group_name,
                  DType dtype) {
  Group& g = resolve_group(op, group_name);
  ReduceOp r = parse_reduce_op(op, reduce_op);
  return {&g, r, reduce_fn_checked(op, dtype, r)};
}

Group& call_group(const KernelCall& c, std::string_view op, size_t group_arg) {
  PreparedCollective* p = prepared(c, op, group_arg);
  return p ? *p->group : resolve_group(op, c.arg(group_arg).to_string());
}

Reduction call_reduction(const KernelCall& c, std::string_view op, size_t reduce_arg,
                         size_t group_arg, DType dtype) {
  PreparedCollective* p = prepared(c, op, group_arg);
  if (!p) return prepare(op, c.arg(reduce_arg).to_string(), c.arg(group_arg).to_string(), dtype);
  if (!p->reduction || p->dtype != dtype) {
    p->op = parse_reduce_op(op, c.arg(reduce_arg).to_string());
    p->fn = reduce_fn_checked(op, dtype, p->op);
    p->dtype = dtype;
    p->reduction = true;
  }
  return {p->group.get(), p->op, p->fn};
}

ReduceOp parse_reduce_op(std::string_view op, std::string_view name) {
  if (name == "sum") return ReduceOp::sum;
  if (name == "avg") return ReduceOp::avg;
  if (name == "max") return ReduceOp::max;
  if (name == "min") return ReduceOp::min;
  invalid_usage("{}: unknown reduce_op '{}' (valid: sum, avg, max, min)", op, name);
}

ReduceFn reduce_fn_checked(std::string_view op, DType dtype, ReduceOp reduce_op) {
  ReduceFn fn = reduce_fn(dtype, reduce_op);
  SF_CHECK(fn, "{}: dtype {} is not supported on cpu (supported: f32, bf16, f16, f64, i32, i64)",
           op, dtype_name(dtype));
  return fn;
}

SymmArg::SymmArg(const Tensor& t, std::string_view op, std::string_view arg, const Group& group)
    : tensor_(&t) {
  view_.data = t.raw_data();
  view_.dtype = t.dtype();
  view_.storage = t.storage().get();
  if (t.numel() == 0 && !dynamic_cast<const SymmetricStorage*>(view_.storage))
    refuse_empty_symmetric(op, arg, t);  // Note [empty symmetric arguments]
  symmetric_heap_of(view_, op, arg, group);
  if (!t.is_contiguous()) {
    invalid_usage(
        "{}: symmetric argument '{}' ({} with strides {}) must be contiguous: peers "
        "address it at the same offsets; make it contiguous first",
        op, arg, t.str(), shape_str(t.strides()));
  }
}

void check_spec(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                const Shape& shape, std::string_view like) {
  if (t.dtype() != dtype || t.shape() != shape) {
    invalid_usage("{}: argument '{}' is {} but must be {}{} ({})", op, arg, t.str(),
                  dtype_name(dtype), shape_str(shape), like);
  }
}

namespace {
// Byte range [lo, hi) a tensor's elements can touch.
std::pair<const char*, const char*> byte_range(const Tensor& t) {
  const char* base = static_cast<const char*>(t.raw_data());
  if (t.numel() == 0 || !base) return {base, base};
  int64_t lo = 0, hi = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t span = (t.shape()[size_t(d)] - 1) * t.strides()[size_t(d)];
    (span < 0 ? lo : hi) += span;
  }
  int64_t elem = int64_t(dtype_size(t.dtype()));
  return {base + lo * elem, base + (hi + 1) * elem};
}
}  // namespace

void check_no_overlap(std::string_view op, std::string_view a_name, const Tensor& a,
                      std::string_view b_name, const Tensor& b) {
  auto [a_lo, a_hi] = byte_range(a);
  auto [b_lo, b_hi] = byte_range(b);
  if (a_lo < b_hi && b_lo < a_hi) {
    invalid_usage(
        "{}: argument '{}' overlaps argument '{}' in memory; peers read '{}' while "
        "this rank writes '{}', so they must be separate buffers",
        op, a_name, b_name, b_name, a_name);
  }
}

ScatterGeometry check_reduce_scatter(std::string_view op, const Tensor& input,
                                     std::string_view input_name, int w, bool split_last_dim,
                                     const Tensor& output, std::string_view output_name) {
  SF_CHECK(input.dim() >= 1, "{}: argument '{}' ({}) needs at least one dimension", op, input_name,
           input.str());
  const int64_t d = split_last_dim ? input.dim() - 1 : 0;
  const int64_t extent = input.size(d);
  SF_CHECK(extent % w == 0,
           "{}: dim {} of argument '{}' ({}) is not divisible by the group size {}", op, d,
           input_name, input.str(), w);
  Shape expected = input.shape();
  expected[size_t(d)] = extent / w;
  check_spec(op, output_name, output, input.dtype(), expected,
             fmt::format("'{}' split {} ways along dim {}", input_name, w, d));
  check_no_overlap(op, output_name, output, input_name, input);
  ScatterGeometry g;
  int64_t inner = 1;
  for (int64_t i = 0; i < d; ++i) g.outer *= input.size(i);
  for (int64_t i = d + 1; i < input.dim(); ++i) inner *= input.size(i);
  g.chunk = extent / w * inner;
  g.row_stride = extent * inner;
  return g;
}

void check_all_gather(std::string_view op, const Tensor& input, std::string_view input_name, int w,
                      const Tensor& out) {
  SF_CHECK(input.dim() >= 1, "{}: argument '{}' ({}) needs at least one dimension", op, input_name,
           input.str());
  Shape expected = input.shape();
  expected[0] *= w;
  check_spec(op, "out", out, input.dtype(), expected,
             fmt::format("'{}' gathered from {} ranks along dim 0", input_name, w));
  check_no_overlap(op, "out", out, input_name, input);
}

int64_t check_all_to_all(std::string_view op, const Tensor& input, const Tensor& out,
                         const Tensor& in_splits, const Tensor& out_splits_offsets, int w) {
  check_spec(op, "in_splits", in_splits, DType::i64, {w}, "one row count per rank");
  check_spec(op, "out_splits_offsets", out_splits_offsets, DType::i64, {2, w},
             "received rows and offsets per rank");
  SF_CHECK(input.dim() >= 1, "{}: argument 'input' ({}) needs at least one dimension", op,
           input.str());
  Shape out_row(out.shape()), in_row(input.shape());
  SF_CHECK(out.dtype() == input.dtype() && out.dim() == input.dim() &&
               std::equal(in_row.begin() + 1, in_row.end(), out_row.begin() + 1),
           "{}: argument 'out' ({}) must have the dtype and the row shape (all dims but the "
           "first) of 'input' ({})",
           op, out.str(), input.str());
  check_no_overlap(op, "out", out, "input", input);
  int64_t row_bytes = int64_t(dtype_size(input.dtype()));
  for (int64_t i = 1; i < input.dim(); ++i) row_bytes *= input.size(i);
  return row_bytes;
}

int64_t check_equal_all_to_all(std::string_view op, const Tensor& input, int w,
                               const Tensor& out) {
  SF_CHECK(input.dim() >= 1, "{}: argument 'input' ({}) needs at least one dimension", op,
           input.str());
  SF_CHECK(input.size(0) % w == 0,
           "{}: dim 0 of argument 'input' ({}) is not divisible by the group size {}", op,
           input.str(), w);
  check_spec(op, "out", out, input.dtype(), input.shape(), "like 'input'");
  check_no_overlap(op, "out", out, "input", input);
  return int64_t(input.nbytes()) / w;
}

OutBuffer::OutBuffer(const Tensor& out) : out_(&out) {
  if (out.is_contiguous()) {
    data_ = out.raw_data();
  } else {
    temp_ = Tensor::empty(out.shape(), out.dtype());
    data_ = temp_.raw_data();
  }
}

void OutBuffer::finish() {
  if (temp_.defined()) copy_into(*out_, temp_.raw_data());
}

namespace {
template <typename F>
void for_each_offset(const Tensor& t, F&& f) {
  const Shape& shape = t.shape();
  const Strides& strides = t.strides();
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides[d];
    f(i, off);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}
}  // namespace

void copy_into(const Tensor& t, const void* src) {
  size_t elem = dtype_size(t.dtype());
  if (t.is_contiguous()) {
    if (t.numel() > 0) std::memcpy(t.raw_data(), src, size_t(t.numel()) * elem);
    return;
  }
  char* dst = static_cast<char*>(t.raw_data());
  const char* s = static_cast<const char*>(src);
  for_each_offset(t, [&](int64_t i, int64_t off) {
    std::memcpy(dst + off * int64_t(elem), s + i * int64_t(elem), elem);
  });
}

void copy_from(void* dst, const Tensor& t) {
  size_t elem = dtype_size(t.dtype());
  if (t.is_contiguous()) {
    if (t.numel() > 0) std::memcpy(dst, t.raw_data(), size_t(t.numel()) * elem);
    return;
  }
  const char* src = static_cast<const char*>(t.raw_data());
  char* d = static_cast<char*>(dst);
  for_each_offset(t, [&](int64_t i, int64_t off) {
    std::memcpy(d + i * int64_t(elem), src + off * int64_t(elem), elem);
  });
}

void fingerprint(Group& group, std::string_view op, DType dtype, int64_t numel,
                 std::string_view detail) {
  if (!tunables().debug_collectives) return;
  std::string mine = fmt::format("{}{}{} {} x {}", op, detail.empty() ? "" : " ", detail,
                                 dtype_name(dtype), numel);
  std::vector<std::string> all = group.allgather(mine, op);
  bool same = true;
  for (const std::string& s : all) same = same && s == all[0];
  if (same) return;
  std::string calls;
  for (size_t r = 0; r < all.size(); ++r) {
    calls += fmt::format("\n  rank {}: {}", group.global_rank(int(r)), all[r]);
  }
  invalid_usage("{}: ranks of group '{}' issued different collectives (debug_collectives):{}", op,
                group.name(), calls);
}

void refuse_multicast(std::string_view op, std::string_view instead) {
  invalid_usage("{}: needs NVLink multicast, which the cpu backend lacks; use {} instead", op,
                instead);
}

// Note [reduction dtypes]: a reduction kernel adds, averages or compares elements, so it takes
// the dtypes its typed loops exist for (reduce_fn: f32, bf16, f16, f64, i32, i64 on cpu); ops
// that only move bytes (all-gather, permute, put/get) take any. Declared once for every symm_mem
// kernel with a reduce_op argument, so a compiler asks before placing a reduction (the torch
// bridge leaves it to PyTorch, naming why) instead of failing when it runs.
static std::string reduction_dtypes(const OpDef& op, std::span<const Value> args) {
  if (op.schema().arg_index("reduce_op") < 0) return "";
  for (const Value& a : args) {
    if (a.is_tensor() && !reduce_fn(a.to_tensor().dtype(), ReduceOp::sum)) {
      return fmt::format("{}: dtype {} has no cpu reduction (f32, bf16, f16, f64, i32, i64)",
                         op.name(), dtype_name(a.to_tensor().dtype()));
    }
  }
  return "";
}

SYMMFLOW_LIBRARY_IMPL(symm_mem, cpu, m) { m.backend_check(reduction_dtypes); }

}  // namespace symmflow::cpu

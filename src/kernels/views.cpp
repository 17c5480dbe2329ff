// Contract in views.hpp.
#include "kernels/views.hpp"

#include "kernels/cpu/common.hpp"
#include "ops/aten/meta.hpp"
#include "ops/aten/meta_multi.hpp"
#include "ops/aten/meta_scatter.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::kernels {
namespace {

void set_view(KernelCall& call, const Tensor& self, const aten_meta::ViewGeometry& g) {
  call.outputs.at(0) = self.as_strided(g.shape, g.strides, g.offset);
}

Kernel cat_kernel(bool out_variant) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const std::vector<Tensor>& tensors = call.arg("tensors").to_tensor_list();
    aten_meta::CatInfo info = aten_meta::cat_info(op, tensors, call.arg("dim"));
    const Tensor& dst = out_variant ? call.arg("out").to_tensor() : call.out(0);
    if (out_variant) {
      aten_meta::check_out(op, "out", dst, info.spec);
      for (size_t i = 0; i < tensors.size(); ++i) {
        SF_CHECK(!cpu::may_overlap(dst, tensors[i]), "{}: out overlaps tensors[{}]", op, i);
      }
    }
    if (dst.numel() == 0) return;
    size_t d = size_t(info.dim);
    int64_t offset = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (info.skipped[i]) continue;
      const Tensor& t = tensors[i];
      Tensor part = dst.as_strided(t.shape(), dst.strides(), offset * dst.strides()[d]);
      symmflow::call("aten::copy_", {part, t});
      offset += t.shape()[d];
    }
  };
}

void view_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self, aten_meta::view_geometry(call.op.name(), self, call.arg("size")));
}

void reshape_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::ReshapeGeometry g =
      aten_meta::reshape_geometry(call.op.name(), self, call.arg("shape"));
  if (g.strides) {
    set_view(call, self, {g.shape, *g.strides, 0});
    return;
  }
  Tensor copy = symmflow::call("aten::clone", {self}).to_tensor();
  call.outputs.at(0) = copy.as_strided(g.shape, contiguous_strides(g.shape), 0);
}

void slice_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self,
           aten_meta::slice_geometry(call.op.name(), self, call.arg("dim"), call.arg("start"),
                                     call.arg("end"), call.arg("step")));
}

void t_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self, aten_meta::t_geometry(call.op.name(), self));
}

void transpose_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self,
           aten_meta::transpose_geometry(call.op.name(), self, call.arg("dim0").to_int(),
                                         call.arg("dim1").to_int()));
}

void permute_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self, aten_meta::permute_geometry(call.op.name(), self, call.arg("dims")));
}

void expand_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self, aten_meta::expand_geometry(call.op.name(), self, call.arg("size")));
}

// One view per piece (Note [list returns]); `outputs` comes sized by the dispatcher.
void set_views(KernelCall& call, const Tensor& self,
               const std::vector<aten_meta::ViewGeometry>& views) {
  SF_CHECK(call.outputs.size() == views.size(), "{}: {} results expected but the split gives {}",
           call.op.name(), call.outputs.size(), views.size());
  for (size_t i = 0; i < views.size(); ++i)
    call.outputs[i] = self.as_strided(views[i].shape, views[i].strides, views[i].offset);
}

void split_with_sizes_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_views(call, self,
            aten_meta::split_with_sizes_geometry(call.op.name(), self, call.arg("split_sizes"),
                                                 call.arg("dim")));
}

void split_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_views(call, self,
            aten_meta::split_geometry(call.op.name(), self, call.arg("split_size"),
                                      call.arg("dim")));
}

void unsqueeze_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self, aten_meta::unsqueeze_geometry(call.op.name(), self, call.arg("dim")));
}

void squeeze_dims_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self, aten_meta::squeeze_dims_geometry(call.op.name(), self, call.arg("dim")));
}

// Note [pad geometry]: the whole result filled, then self's window copied over it.
void constant_pad_nd_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::PadGeometry g = aten_meta::pad_geometry(call.op.name(), self, call.arg("pad"));
  const Tensor& out = call.out(0);
  if (out.numel() == 0) return;
  if (numel(g.window) < out.numel()) {
    symmflow::call("aten::full.out", {Value(out.shape()), call.arg("value")}, {{"out", out}});
  }
  if (numel(g.window) > 0) symmflow::call("aten::copy_", {aten_meta::pad_window(g, out), g.self_view});
}

// out = self, then src over the slice.
void slice_scatter_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& src = call.arg("src").to_tensor();
  const Tensor& out = call.out(0);
  aten_meta::ViewGeometry g = aten_meta::slice_scatter_geometry(
      op, out, src, call.arg("dim"), call.arg("start"), call.arg("end"), call.arg("step"));
  SF_CHECK(out.shape() == self.shape(), "{}: internal: the output has shape {}, self {}", op,
           shape_str(out.shape()), shape_str(self.shape()));
  if (out.numel() == 0) return;
  symmflow::call("aten::copy_", {out, self});
  if (numel(g.shape) > 0)
    symmflow::call("aten::copy_", {out.as_strided(g.shape, g.strides, g.offset), src});
}

}  // namespace

void register_view_kernels(Library& m) {
  m.impl("view", view_kernel);
  m.impl("_unsafe_view", view_kernel);
  m.impl("permute", permute_kernel);
  m.impl("expand", expand_kernel);
  m.impl("unsqueeze", unsqueeze_kernel);
  m.impl("squeeze.dims", squeeze_dims_kernel);
  m.impl("reshape", reshape_kernel);
  m.impl("slice.Tensor", slice_kernel);
  m.impl("split_with_sizes", split_with_sizes_kernel);
  m.impl("split.Tensor", split_kernel);
  m.impl("t", t_kernel);
  m.impl("transpose.int", transpose_kernel);
  m.impl("cat", cat_kernel(false));
  m.impl("cat.out", cat_kernel(true));
  m.impl("constant_pad_nd", constant_pad_nd_kernel);
  m.impl("slice_scatter", slice_scatter_kernel);
}

}  // namespace symmflow::kernels

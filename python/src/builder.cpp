// The program builder and shape inference for Python (symmflow/api/builder.hpp): what the torch
// bridge's FX importer and its fake kernels ask of the C++ registry (Note [program builder] in
// src/api/builder.cpp).
//
// Arguments cross as Python objects: a `Ref` (a value of the builder) or a list of them; a
// `Meta` (a meta tensor: dtype name and shape, for infer_shapes); a `DTypeArg` (a ScalarType
// literal); otherwise None, bool, int, float (inf and nan too), str or a list of ints or floats.
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>

#include "binding.hpp"
#include "symmflow/api/builder.hpp"

namespace symmflow::python {

namespace {

struct Ref {
  int id = -1;
};
struct Meta {
  std::string dtype;
  std::vector<int64_t> shape;
};
struct DTypeArg {
  std::string name;
};

DType dtype_of(const std::string& name, const std::string& what) {
  std::optional<DType> t = parse_dtype(name);
  SF_CHECK(t.has_value(), "{}: unknown dtype '{}'", what, name);
  return *t;
}

// A literal (no tensors): None, bool, int, float, str, a DTypeArg, or a list of ints or floats.
Value literal_of(const nb::handle& o, const std::string& what) {
  DTypeArg* d = nullptr;
  if (nb::try_cast(o, d) && d) return Value(dtype_of(d->name, what));
  Meta* m = nullptr;
  if (nb::try_cast(o, m) && m) {
    return Value(Tensor::meta(Shape(m->shape.begin(), m->shape.end()), dtype_of(m->dtype, what)));
  }
  if (nb::isinstance<nb::list>(o) || nb::isinstance<nb::tuple>(o)) {
    std::vector<Tensor> metas;
    size_t n = 0;
    for (nb::handle item : o) {
      ++n;
      Meta* im = nullptr;
      if (nb::try_cast(item, im) && im)
        metas.push_back(Tensor::meta(Shape(im->shape.begin(), im->shape.end()),
                                     dtype_of(im->dtype, what)));
    }
    if (!metas.empty()) {
      SF_CHECK(metas.size() == n, "{}: a list mixes tensors and numbers", what);
      return Value(std::move(metas));
    }
  }
  return import_value(o, what);
}

api::ProgramBuilder::Arg arg_of(const nb::handle& o, const std::string& what) {
  Ref* r = nullptr;
  if (nb::try_cast(o, r) && r) return api::ProgramBuilder::Arg::of(r->id);
  if (nb::isinstance<nb::list>(o) || nb::isinstance<nb::tuple>(o)) {
    std::vector<int> ids;
    size_t n = 0;
    for (nb::handle item : o) {
      ++n;
      Ref* ir = nullptr;
      if (nb::try_cast(item, ir) && ir) ids.push_back(ir->id);
    }
    if (!ids.empty()) {
      SF_CHECK(ids.size() == n, "{}: a list mixes values and literals", what);
      return api::ProgramBuilder::Arg::of_list(std::move(ids));
    }
  }
  return api::ProgramBuilder::Arg::of_literal(literal_of(o, what));
}

std::pair<std::vector<api::ProgramBuilder::Arg>, std::vector<api::ProgramBuilder::KwArg>>
call_args(const std::string& op, const nb::list& args, const nb::dict& kwargs) {
  std::vector<api::ProgramBuilder::Arg> pos;
  size_t i = 0;
  for (nb::handle a : args) pos.push_back(arg_of(a, fmt::format("{} argument {}", op, i++)));
  std::vector<api::ProgramBuilder::KwArg> kw;
  for (auto [k, v] : kwargs) {
    std::string key = nb::cast<std::string>(k);
    kw.emplace_back(key, arg_of(v, fmt::format("{} argument '{}'", op, key)));
  }
  return {std::move(pos), std::move(kw)};
}

nb::list refs(const std::vector<int>& ids) {
  nb::list out;
  for (int id : ids) out.append(Ref{id});
  return out;
}

nb::list infer_shapes(const std::string& op, const nb::list& args, const nb::dict& kwargs,
                      const std::map<std::string, int64_t>& group_sizes) {
  std::vector<Value> pos;
  size_t i = 0;
  for (nb::handle a : args) pos.push_back(literal_of(a, fmt::format("{} argument {}", op, i++)));
  std::vector<std::pair<std::string, Value>> kw;
  for (auto [k, v] : kwargs) {
    std::string key = nb::cast<std::string>(k);
    kw.emplace_back(key, literal_of(v, fmt::format("{} argument '{}'", op, key)));
  }
  nb::list out;
  for (const api::TensorSpec& s : api::infer_shapes(op, pos, kw, group_sizes))
    out.append(nb::make_tuple(std::string(dtype_name(s.dtype)), s.shape));
  return out;
}

}  // namespace

void bind_builder(nb::module_& m) {
  nb::class_<Ref>(m, "Ref")
      .def(nb::init<int>(), nb::arg("id"))
      .def_ro("id", &Ref::id)
      .def("__repr__", [](const Ref& r) { return fmt::format("Ref({})", r.id); });
  nb::class_<Meta>(m, "Meta")
      .def(nb::init<std::string, std::vector<int64_t>>(), nb::arg("dtype"), nb::arg("shape"))
      .def_ro("dtype", &Meta::dtype)
      .def_ro("shape", &Meta::shape);
  nb::class_<DTypeArg>(m, "DTypeArg")
      .def(nb::init<std::string>(), nb::arg("name"))
      .def_ro("name", &DTypeArg::name);

  nb::class_<api::ProgramBuilder>(m, "ProgramBuilder")
      .def(nb::init<std::string, int, const std::string&>(), nb::arg("name"),
           nb::arg("world_size") = 1, nb::arg("device") = "")
      .def_prop_ro("world_size", &api::ProgramBuilder::world_size)
      .def("add_group", &api::ProgramBuilder::add_group, nb::arg("name"), nb::arg("subgroups"))
      .def("add_input",
           [](api::ProgramBuilder& b, const std::string& name, const std::string& dtype,
              const std::vector<int64_t>& shape) {
             return Ref{b.add_input(name, dtype_of(dtype, "add_input"),
                                    Shape(shape.begin(), shape.end()))};
           },
           nb::arg("name"), nb::arg("dtype"), nb::arg("shape"))
      .def("add_op",
           [](api::ProgramBuilder& b, const std::string& op, const nb::list& args,
              const nb::dict& kwargs, const std::string& name) {
             auto [pos, kw] = call_args(op, args, kwargs);
             return refs(b.add_op(op, pos, kw, name));
           },
           nb::arg("op"), nb::arg("args"), nb::arg("kwargs") = nb::dict(), nb::arg("name") = "",
           "Appends a call of `op`; returns a Ref per result. InvalidUsage when the registry "
           "refuses it (schema binding, shape function), naming the op and argument.")
      .def("add_functional",
           [](api::ProgramBuilder& b, const std::string& op, const nb::list& args,
              const nb::dict& kwargs, const std::string& name) {
             auto [pos, kw] = call_args(op, args, kwargs);
             return refs(b.add_functional(op, pos, kw, name));
           },
           nb::arg("op"), nb::arg("args"), nb::arg("kwargs") = nb::dict(), nb::arg("name") = "")
      .def("type",
           [](const api::ProgramBuilder& b, const Ref& r) {
             api::TensorSpec s = b.type(r.id);
             return nb::make_tuple(s.name, std::string(dtype_name(s.dtype)), s.shape);
           },
           nb::arg("ref"), "(name, dtype, shape) of a value.")
      .def("set_outputs",
           [](api::ProgramBuilder& b, const std::vector<Ref>& outs) {
             std::vector<int> ids;
             for (const Ref& r : outs) ids.push_back(r.id);
             b.set_outputs(ids);
           },
           nb::arg("outputs"))
      .def(
          "add_writeback",
          [](api::ProgramBuilder& b, const Ref& input, const Ref& value) {
            b.add_writeback(input.id, value.id);
          },
          nb::arg("input"), nb::arg("value"),
          "`writeback input = value`: the caller's input holds `value` after a run (same dtype "
          "and shape); InvalidUsage when `input` is no input.")
      .def("finish", &api::ProgramBuilder::finish, nb::arg("filename") = "<builder>");

  m.def("infer_shapes", &infer_shapes, nb::arg("op"), nb::arg("args"),
        nb::arg("kwargs") = nb::dict(), nb::arg("group_sizes") = std::map<std::string, int64_t>(),
        "[(dtype, shape)] of each result of `op` on these arguments (tensors as Meta), from its "
        "C++ shape function: what a fake kernel reports.");
}

}  // namespace symmflow::python

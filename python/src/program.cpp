// Programs, compilation, explain and the op catalogue for Python (symmflow/api/program.hpp,
// explain.hpp, catalogue.hpp). Inputs and outputs are described by symmflow._types.TensorSpec.

#include "binding.hpp"

namespace symmflow::python {

namespace {

nb::list ops() {
  nb::list out;
  for (const api::OpInfo& op : api::list_ops()) {
    nb::dict d;
    d["name"] = op.name;
    d["schema"] = op.schema;
    d["backends"] = op.backends;
    d["inplace"] = op.inplace;  // the op's in-place variant, "" when none
    std::vector<std::string> tags;
    for (size_t start = 0; start < op.tags.size();) {
      size_t comma = op.tags.find(", ", start);
      tags.push_back(op.tags.substr(start, comma - start));
      start = comma == std::string::npos ? op.tags.size() : comma + 2;
    }
    d["tags"] = tags;
    d["symm_args"] = op.symm_args;
    d["group_arg"] = op.group_arg;
    out.append(d);
  }
  return out;
}

// The tunables table (symmflow env): name -> {env, value, default, doc, set}. The one place
// defaults live is C++ (runtime/tunables.cpp); Python asks here.
nb::dict tunables() {
  nb::dict out;
  for (const api::Tunable& t : api::tunables()) {
    nb::dict d;
    d["env"] = t.env;
    d["value"] = t.value;
    d["default"] = t.default_value;
    d["doc"] = t.doc;
    d["set"] = t.set;
    out[t.name.c_str()] = d;
  }
  return out;
}

// The interpreter on one rank: a world of one thread when the caller is not a rank already.
// Read-only inputs are read from copies (Note [read-only inputs] in binding.hpp).
nb::list interpret(const api::Program& p, const std::vector<nb::object>& inputs) {
  SF_CHECK(p.world_size() == 1,
           "Program.interpret: program '{}' is for {} ranks; interpret runs one rank (use "
           "symmflow.run for a world)", p.name(), p.world_size());
  std::vector<Tensor> in = import_inputs(inputs, "inputs", {&p, nullptr});
  std::vector<Tensor> out;
  {
    nb::gil_scoped_release release;
    if (Runtime::current_or_null()) {
      out = p.interpret(in);
    } else {
      api::run_threads(1, [&](api::Rank&) { out = p.interpret(in); });
    }
  }
  nb::list result;
  for (const Tensor& t : out) result.append(export_numpy(t));
  return result;
}

api::CompiledProgram compile(nb::handle program, std::optional<int> world_size, bool race_check,
                             const std::string& device) {
  api::CompileOptions options;
  options.world_size = world_size;
  options.race_check = race_check;
  options.device = device;
  if (nb::isinstance<nb::str>(program)) {
    api::ParseOptions po;
    po.world_size = world_size.value_or(1);
    api::Program p = api::Program::parse(nb::cast<std::string>(program), po);
    nb::gil_scoped_release release;
    return api::compile(p, options);
  }
  const api::Program& p = nb::cast<const api::Program&>(program);
  nb::gil_scoped_release release;
  return api::compile(p, options);
}

}  // namespace

void bind_program(nb::module_& m) {
  m.def("ops", &ops, "The op catalogue: one dict per op (name, schema, backends, tags, ...).");
  m.def("_set_deterministic", &api::set_deterministic, nb::arg("on"),
        "Deterministic (batch-invariant) mode for the rest of the process, as "
        "SYMMFLOW_DETERMINISTIC=1 sets it.");
  m.def(
      "step_profile",
      [] {
        nb::list rows;
        for (const api::StepTotal& t : api::step_profile()) {
          nb::dict d;
          d["step"] = t.step;
          d["total_ms"] = t.total_ms;
          d["calls"] = t.calls;
          rows.append(d);
        }
        return rows;
      },
      "The CPU steps' time per op, the largest first: dicts of step, total_ms and calls, recorded "
      "while SYMMFLOW_STEP_PROFILE=1 (or _set_step_profile(True)); Note [step profile].");
  m.def("_set_step_profile", &api::set_step_profile, nb::arg("on"),
        "Times every CPU step from now on (or stops), as SYMMFLOW_STEP_PROFILE=1 does.");
  m.def("reset_step_profile", &api::reset_step_profile, "Forgets the step times recorded so far.");
  m.def("tunables", &tunables,
        "The tunables in force, as `symmflow env` prints them: name -> {env, value, default, "
        "doc, set}.");

  nb::class_<api::Program>(m, "Program")
      .def("__init__",
           [](api::Program* self, const std::string& text, int world_size,
              const std::string& filename) {
             api::ParseOptions po;
             po.world_size = world_size;
             po.filename = filename;
             new (self) api::Program(api::Program::parse(text, po));
           },
           nb::arg("text"), nb::arg("world_size") = 1, nb::arg("filename") = "<input>")
      .def_static("from_file", &api::Program::parse_file, nb::arg("path"),
                  nb::arg("world_size") = 1)
      .def_prop_ro("name", &api::Program::name)
      .def_prop_ro("text", &api::Program::text)
      .def_prop_ro("filename", &api::Program::filename)
      .def_prop_ro("world_size", &api::Program::world_size)
      .def_prop_ro("inputs", [](const api::Program& p) { return tensor_specs(p.inputs()); })
      .def_prop_ro("outputs", [](const api::Program& p) { return tensor_specs(p.outputs()); })
      .def("with_world_size", &api::Program::with_world_size, nb::arg("world_size"))
      .def("interpret", &interpret, nb::arg("inputs"))
      .def("__repr__", [](const api::Program& p) {
        return fmt::format("<symmflow.Program '{}' world_size={}>", p.name(), p.world_size());
      });

  nb::class_<api::CompiledProgram>(m, "CompiledProgram")
      .def_prop_ro("world_size", &api::CompiledProgram::world_size)
      .def_prop_ro("program", &api::CompiledProgram::source, nb::rv_policy::reference_internal)
      .def_prop_ro("inputs", [](const api::CompiledProgram& c) { return tensor_specs(c.source().inputs()); })
      .def_prop_ro("outputs", [](const api::CompiledProgram& c) { return tensor_specs(c.source().outputs()); })
      .def("plan_text", &api::CompiledProgram::plan_text)
      .def("ir_text", &api::CompiledProgram::ir_text)
      .def("explain_json", &api::CompiledProgram::explain_json)
      .def("explain", [](const api::CompiledProgram& c) {
        return nb::module_::import_("json").attr("loads")(c.explain_json());
      })
      .def("explain_text", [](const api::CompiledProgram& c) {
        return api::format_explain(c.explain(), c.source().filename());
      })
      .def("__repr__", [](const api::CompiledProgram& c) {
        return fmt::format("<symmflow.CompiledProgram '{}' world_size={}>", c.source().name(),
                           c.world_size());
      });

  m.def("compile", &compile, nb::arg("program"), nb::arg("world_size") = nb::none(),
        nb::arg("race_check") = true, nb::arg("device") = "cpu",
        "Compiles a Program or program text (ProgramError with every diagnostic) for `device` "
        "('cpu', or 'cuda': its backend's kernels are loaded first; no GPU is needed).");
}

}  // namespace symmflow::python

// The front door, part 5: building a program node by node, and asking the registry what an op
// call would give, for language bindings (the torch bridge's FX importer, fake kernels).
//
// ProgramBuilder wraps the IR builder (ir/graph.hpp): each add_op binds its arguments to the op's
// schema exactly as eager calls do, types the results with the op's shape function and appends
// the node, or throws InvalidUsage naming the op and argument, so a caller learns per node
// whether symmflow takes it (Note [program builder] in src/api/builder.cpp), on the target device
// when one is given (its kernel exists and takes the arguments). finish() verifies
// the graph and returns a Program, whose text is the IR printed for people.
// infer_shapes runs an op's shape function on argument values whose tensors may be meta tensors:
// what a fake kernel reports.
// Expects: value ids returned by this builder; group names declared with add_group (or "world").
// Guarantees: a builder that threw keeps every node added before the failing call.
// Refuses (InvalidUsage): unknown ops and ids, arguments that do not bind, duplicate names.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "symmflow/api/program.hpp"
#include "symmflow/ops/value.hpp"

namespace symmflow::ir {
class Node;
class Value;
}

namespace symmflow::api {

class ProgramBuilder {
 public:
  // One argument of a call: a value of this builder, a list of them, or a literal.
  struct Arg {
    enum class Kind { value, values, literal };
    Kind kind = Kind::literal;
    int value = -1;
    std::vector<int> values;
    symmflow::Value literal;
    static Arg of(int id) { return {Kind::value, id, {}, {}}; }
    static Arg of_list(std::vector<int> ids) { return {Kind::values, -1, std::move(ids), {}}; }
    static Arg of_literal(symmflow::Value v) { return {Kind::literal, -1, {}, std::move(v)}; }
  };
  using KwArg = std::pair<std::string, Arg>;

  // `device`: "" (any), "cpu" or "cuda[:i]": with a device, a call is also refused when that
  // backend has no kernel for the op or its kernel check refuses the arguments (Note [kernel
  // checks] in ops/registry.hpp), naming why.
  ProgramBuilder(std::string name, int world_size, const std::string& device = "");
  ~ProgramBuilder();
  ProgramBuilder(ProgramBuilder&&) noexcept;
  ProgramBuilder& operator=(ProgramBuilder&&) noexcept;

  int world_size() const;
  // `group NAME = {..}, {..}`: explicit subgroups of global ranks (empty: the whole world).
  void add_group(const std::string& name, std::vector<std::vector<int>> subgroups);
  // A graph input; returns its id.
  int add_input(const std::string& name, DType dtype, Shape shape);
  // A call of `op` ("aten::mm", "symm_mem::one_shot_all_reduce"); returns the ids of its results
  // (one per element of a list return). `name`: a hint for the results' names.
  std::vector<int> add_op(const std::string& op, const std::vector<Arg>& args,
                          const std::vector<KwArg>& kwargs, const std::string& name = "");
  // functional<op> of a mutating op: the op's returns, then the new value of each written
  // argument, in argument order.
  std::vector<int> add_functional(const std::string& op, const std::vector<Arg>& args,
                                  const std::vector<KwArg>& kwargs, const std::string& name = "");
  TensorSpec type(int id) const;  // name, dtype and shape of a value
  void set_outputs(const std::vector<int>& ids);
  // `writeback INPUT = VALUE`: the caller's input holds `value` once the program ran (an input the
  // traced program mutated); the same dtype and shape. A later writeback of the input replaces it.
  void add_writeback(int input, int value);
  // Verifies the graph and returns it as a Program (ProgramError with the diagnostics).
  Program finish(const std::string& filename) const;

 private:
  ir::Value* value(int id, const std::string& where) const;
  std::vector<int> record(const std::vector<ir::Value*>& outputs);
  void check_kernel(ir::Node* n);
  struct State;
  std::unique_ptr<State> state_;
};

// The dtype and shape of each result of `op` called with `args` / `kwargs` (tensors may be meta
// tensors), as its shape function computes them; `group_sizes` gives the size of every group
// the call may name. InvalidUsage naming the op and argument when they do not bind or the shape
// function refuses them.
std::vector<TensorSpec> infer_shapes(const std::string& op, const std::vector<symmflow::Value>& args,
                                     const std::vector<std::pair<std::string, symmflow::Value>>& kwargs,
                                     const std::map<std::string, int64_t>& group_sizes);

}  // namespace symmflow::api

// The front door, part 4: the op catalogue, schema checks, tunables and the eager demo block,
// as data (what `symmflow ops`, `env` and `demo` print).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "symmflow/core/dtype.hpp"

namespace symmflow::api {

struct OpInfo {
  std::string name;    // "symm_mem::one_shot_all_reduce"
  std::string schema;  // the schema printed
  std::vector<std::string> backends;   // "cpu", "cuda"
  std::vector<std::string> symm_args;  // arguments that must live in symmetric memory
  std::string group_arg;               // empty when the op does not communicate
  std::string functional, inplace, out;  // variants; empty when none
  std::string tags;  // "collective, in_place" (Note [op tags] in ops/registry.hpp); empty: none
  // How a collective moves data, as its definition declares (OpExchange in ops/registry.hpp):
  // "pull: barrier, read every peer's input, barrier"; empty when not declared.
  std::string exchange;
};

// Registered ops, sorted by name, of namespace `ns` (every namespace when empty); InvalidUsage
// "no ops in namespace 'x' (namespaces: ...)" for a namespace without ops.
std::vector<OpInfo> list_ops(const std::string& ns = "");
std::vector<std::string> op_namespaces();

// One schema parsed and validated (InvalidUsage naming the problem), with its alias analysis.
struct SchemaReport {
  std::string schema;                // printed back
  bool is_mutable = false;
  std::vector<std::string> written;  // argument names annotated `!`
  std::vector<std::string> out_args;
  std::vector<std::string> returns;  // per return: "fresh" or "aliases <arg>"
  bool is_view = false;
};
SchemaReport check_schema(const std::string& text);

struct Tunable {
  std::string name, env, value, default_value, doc;
  bool set = false;  // the variable is set in the environment
};
// The tunables in force; InvalidUsage naming a variable that does not parse.
std::vector<Tunable> tunables();
// Deterministic mode for the rest of the process, as SYMMFLOW_DETERMINISTIC=1 sets it (Note
// [batch-invariant products]); the torch backend's option {"deterministic": True} calls it.
void set_deterministic(bool on);

// Note [step profile] (exec/step_profile.cpp): the CPU steps' time per op since the start or the
// last reset, the largest first; recorded while the tunable step_profile is on
// (SYMMFLOW_STEP_PROFILE=1, or set_step_profile(true) for the rest of the process).
struct StepTotal {
  std::string step;  // the op (a fused region: its body's ops) and its largest operand's size
  double total_ms = 0;
  int64_t calls = 0;
};
std::vector<StepTotal> step_profile();
void set_step_profile(bool on);
void reset_step_profile();

// The demo's eager MLP block (mm -> gelu -> rms_norm -> softmax) on [m x k] @ [k x n] in `dtype`,
// checked against a double reference: the per-op median times of 21 calls and the largest
// relative error.
struct EagerBlockResult {
  int64_t m = 0, k = 0, n = 0;
  std::vector<std::pair<std::string, double>> median_us;  // per op
  double worst_rel_error = 0;
};
EagerBlockResult run_eager_mlp_block(DType dtype);

}  // namespace symmflow::api

// `symmflow demo`: what a newcomer sees first. Lists the op catalogue, then runs a small MLP block
// eagerly (mm -> gelu -> rms_norm -> softmax) in f32 and bf16, checks every element against a
// naive double-precision reference and prints per-op timings (api::run_eager_mlp_block).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "symmflow/symmflow.hpp"

namespace symmflow::tool {

namespace {

bool run_block(DType dtype, double tol) {
  api::EagerBlockResult r = api::run_eager_mlp_block(dtype);
  bool ok = r.worst_rel_error <= tol;
  fmt::print("  {:>4} [{}x{}] @ [{}x{}]: ", dtype_name(dtype), r.m, r.k, r.k, r.n);
  for (auto& [op, us] : r.median_us) fmt::print("{} {:.1f} us  ", op, us);
  fmt::print("| max rel err {:.2e} (tol {:.0e}) {}\n", r.worst_rel_error, tol, ok ? "OK" : "FAILED");
  return ok;
}

int run_demo() {
  fmt::print("symmflow {} demo\n\nop catalogue:\n", SYMMFLOW_VERSION);
  for (const std::string& ns : api::op_namespaces()) {
    std::vector<api::OpInfo> ops = api::list_ops(ns);
    size_t with_kernel = std::count_if(ops.begin(), ops.end(), [](const api::OpInfo& o) {
      return std::find(o.backends.begin(), o.backends.end(), "cpu") != o.backends.end();
    });
    fmt::print("  {:<9} {:>3} ops, {:>3} with a cpu kernel\n", ns, ops.size(), with_kernel);
  }
  fmt::print("\nsymm_mem ops and the arguments they need in symmetric memory:\n");
  for (const api::OpInfo& op : api::list_ops("symm_mem")) {
    fmt::print("  {:<42} symm: {}\n", op.name,
               op.symm_args.empty() ? "-" : fmt::format("{}", fmt::join(op.symm_args, ", ")));
  }
  fmt::print("\neager MLP block (mm -> gelu -> rms_norm -> softmax), checked against a double "
             "reference, median of 21 calls:\n");
  bool ok = run_block(DType::f32, 1e-4);
  ok = run_block(DType::bf16, 5e-2) && ok;
  fmt::print("\n{}\n", ok ? "demo: all results match the reference" : "demo: MISMATCH");
  return ok ? 0 : 1;
}

}  // namespace

Command add_demo_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("demo", "Show the op catalogue and run a checked eager block");
  return {sub, run_demo};
}

}  // namespace symmflow::tool

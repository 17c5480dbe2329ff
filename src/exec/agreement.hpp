// Rank agreement (internal to exec; Note [rank agreement] in agreement.cpp): the ranks of the
// world that run a communicating plan check, through one small bootstrap all-gather, that they
// compiled the same plan (at construction) and bind inputs of the same dtype, shape and strides
// (at run, only when this rank's bound signature differs from the last agreed one).
//
// Expects: every rank of the world makes the same calls (SPMD), with SYMMFLOW_RANK_AGREEMENT set
// alike. Guarantees: a disagreement raises InvalidUsage with the same text on every rank, naming
// the input, each rank's value and the input's source line, or, for different plans, the ranks
// and what differs (program name, world size, groups, inputs, step count, pools, steps).
// Refuses nothing else; a world of one rank never communicates.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/core/tensor.hpp"
#include "symmflow/passes/plan.hpp"
#include "symmflow/runtime/bootstrap.hpp"

namespace symmflow::exec::detail {

// A 64-bit hash of the plan's structure as the peers see it (Note [rank agreement]); also the
// program of Note [program steps in agreement] (src/runtime/agreement.cpp).
uint64_t plan_hash(const passes::Plan& plan);

class RankAgreement {
 public:
  // `bootstrap`: the world's; the members are every rank of it.
  RankAgreement(const passes::Plan& plan, Bootstrap& bootstrap);

  // Construction: the ranks agree on the plan's fingerprint and declared inputs. `who` prefixes
  // the message ("Executable").
  void agree_on_plan(std::string_view who);
  // A run: when `inputs` differ (dtype, shape or strides, or count, or placement) from the last
  // agreed binding, one all-gather; otherwise nothing. `placements` (empty, or one per input)
  // names where an input is bound without a copy ("symmetric heap 3 at byte 0": Note [symmetric
  // inputs bound in place] in executable.cpp); "" for the others. Ranks must agree on it too.
  void agree_on_inputs(const std::vector<Tensor>& inputs, std::string_view who,
                       const std::vector<std::string>& placements = {});
  // All-gathers made so far (construction included).
  size_t exchanges() const { return exchanges_; }

 private:
  struct Bound {
    bool defined = false;
    DType dtype = DType::f32;
    Shape shape;
    Strides strides;
    std::string placement;
    bool operator==(const Bound&) const = default;
  };
  bool same_as_agreed(const std::vector<Tensor>& inputs,
                      const std::vector<std::string>& placements) const;
  bool matches_plan(const std::vector<Tensor>& inputs) const;  // count, dtypes and shapes
  std::vector<std::string> allgather(std::string mine, std::string_view who);
  std::string input_label(size_t i) const;  // "input 'x' (tp_mlp.sf:3)"

  const passes::Plan& plan_;
  Bootstrap& bootstrap_;
  std::vector<int> members_;
  bool agreed_once_ = false;
  std::vector<Bound> agreed_;  // the binding of the last agreed run
  size_t exchanges_ = 0;
};

// Whether the plan communicates (a symm pool or a step with a group).
bool plan_communicates(const passes::Plan& plan);

}  // namespace symmflow::exec::detail

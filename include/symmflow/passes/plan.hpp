// The plan: the compiled form of a graph. Steps in schedule order, every value that needs memory
// bound to (pool, offset, bytes), pool sizes with their lower bounds, and every copy the compiler
// added with its reason. Made by plan_memory + emit_plan; run by exec::Executable.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "symmflow/ir/graph.hpp"

namespace symmflow::passes {

struct PoolPlan {
  std::string name;  // "regular", "symm[tp]"
  ir::Layout layout;
  size_t bytes = 0;        // planned peak (the pool's size)
  size_t lower_bound = 0;  // the most bytes live at one step
};

struct BufferPlan {
  std::string name;  // the value's name
  ir::TensorType type;
  int pool = -1;     // index into pools; -1 for a view (aliases `alias_of`'s memory, made by its
                     // step at run time) or an argument mutated in place
  int alias_of = -1;  // buffer index for views / in-place results
  size_t offset = 0;  // bytes into the pool, 64-byte aligned
  size_t bytes = 0;
  int first_step = 0;  // step that defines it
  int last_step = 0;   // last step that reads it (steps.size() for graph outputs)
  bool intermediate = true;  // false for graph outputs
};

struct CopyInfo {
  int step = -1;
  std::string kind;    // "input" (copy-in of a graph input), "identity", "functional"
  std::string reason;  // why the compiler added it
  size_t bytes = 0;
};

struct Plan {
  std::shared_ptr<ir::Graph> graph;  // the optimised graph the steps point into
  std::vector<const ir::Node*> steps;
  std::vector<PoolPlan> pools;
  std::vector<BufferPlan> buffers;
  std::unordered_map<const ir::Value*, int> buffer_of;  // every non-input value that has memory
  std::vector<CopyInfo> copies;

  std::string str() const;  // the plan printed like a program (see emit_plan.cpp)
};

}  // namespace symmflow::passes

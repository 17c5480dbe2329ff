// Contract: see include/symmflow/exec/groups.hpp.
#include "symmflow/exec/groups.hpp"

#include <fmt/ranges.h>

namespace symmflow::exec {

void ensure_groups(const ir::Graph& graph, Runtime& rt) {
  const int world = rt.world_size();
  for (const ir::GroupDecl& g : graph.groups()) {
    // The runtime's own, made on its first use (Note [groups of members only] in
    // src/runtime/runtime.cpp): a plan that never uses it waits for no rank outside its groups.
    if (g.name == "world") continue;
    int size = g.size(world);
    SF_CHECK(!g.subgroups.empty() || (size > 0 && world % size == 0),
             "group '{}' splits the world into blocks of {} ranks, which does not divide {} ranks",
             g.name, size, world);
    // A rank in no subgroup of an explicit group creates none: the verifier refused every op on
    // such a group (Note [explicit groups] in src/ir/graph.cpp).
    std::vector<int> ranks = g.members_of(rt.rank(), world);
    if (rt.has_group(g.name)) {
      // A name made earlier (another program, eager code) must mean the same members: the same
      // size alone would let one name silently stand for two splits of the world.
      const std::vector<int>& have = rt.group(g.name)->ranks();
      SF_CHECK(ranks.empty() || have == ranks,
               "group '{}' is ranks [{}] on this runtime but the graph declares [{}] for rank {}",
               g.name, fmt::join(have, ", "), fmt::join(ranks, ", "), rt.rank());
      continue;
    }
    if (!ranks.empty()) rt.new_group(g.name, std::move(ranks));
  }
}

}  // namespace symmflow::exec

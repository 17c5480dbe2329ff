// Contract: see include/symmflow/exec/groups.hpp.
#include "symmflow/exec/groups.hpp"

namespace symmflow::exec {

void ensure_groups(const ir::Graph& graph, Runtime& rt) {
  const int world = rt.world_size();
  for (const ir::GroupDecl& g : graph.groups()) {
    int size = g.size(world);
    SF_CHECK(!g.subgroups.empty() || (size > 0 && world % size == 0),
             "group '{}' splits the world into blocks of {} ranks, which does not divide {} ranks",
             g.name, size, world);
    if (rt.has_group(g.name)) {
      int have = rt.group(g.name)->size();
      SF_CHECK(have == size, "group '{}' has {} ranks on this runtime but the graph declares {}",
               g.name, have, size);
      continue;
    }
    // A rank in no subgroup of an explicit group creates none: the verifier refused every op on
    // such a group (Note [explicit groups] in src/ir/graph.cpp).
    std::vector<int> ranks = g.members_of(rt.rank(), world);
    if (!ranks.empty()) rt.new_group(g.name, std::move(ranks));
  }
}

}  // namespace symmflow::exec

// Contract: see include/symmflow/exec/groups.hpp.
#include "symmflow/exec/groups.hpp"

#include <numeric>

namespace symmflow::exec {

void ensure_groups(const ir::Graph& graph, Runtime& rt) {
  const int world = rt.world_size();
  for (const ir::GroupDecl& g : graph.groups()) {
    int block = g.block == 0 ? world : g.block;
    SF_CHECK(block > 0 && world % block == 0,
             "group '{}' splits the world into blocks of {} ranks, which does not divide {} ranks",
             g.name, block, world);
    if (rt.has_group(g.name)) {
      int have = rt.group(g.name)->size();
      SF_CHECK(have == block, "group '{}' has {} ranks on this runtime but the graph declares {}",
               g.name, have, block);
      continue;
    }
    std::vector<int> ranks(static_cast<size_t>(block));
    std::iota(ranks.begin(), ranks.end(), rt.rank() / block * block);
    rt.new_group(g.name, std::move(ranks));
  }
}

}  // namespace symmflow::exec

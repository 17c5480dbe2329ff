// Hosts of a world (Note [hosts] in include/symmflow/runtime/bootstrap.hpp): the simulated host id
// a test sets per process, and the error for shared memory asked across hosts.
#include <cerrno>
#include <cstdlib>

#include "runtime/rendezvous.hpp"

namespace symmflow {

std::optional<int> simulated_host_id() {
  const char* v = std::getenv("SYMMFLOW_HOST_ID");
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long id = std::strtol(v, &end, 10);
  SF_CHECK(*v != '\0' && *end == '\0' && errno == 0 && id >= 0 && id <= 65535,
           "SYMMFLOW_HOST_ID='{}': expected an integer in [0, 65535], the simulated host of this "
           "process (ranks with different ids share no memory; docs/multihost.md)",
           v);
  return int(id);
}

void refuse_spanning_allocation(const Bootstrap& b, const std::vector<int>& members,
                                std::string_view op) {
  std::string where;
  for (int r : members)
    where += fmt::format("{}rank {} on {}", where.empty() ? "" : ", ", r, b.host_name(r));
  invalid_usage(
      "{}: the ranks of this allocation span several hosts ({}); shared memory is allocated only "
      "among the ranks of one host (a group that spans hosts places its symmetric memory per "
      "host: Note [spanning groups])",
      op, where);
}

}  // namespace symmflow

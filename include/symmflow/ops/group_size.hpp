// Shape functions of collectives need the size of a group by name (all-gather grows dim 0 by the
// world size). Whoever owns groups (the runtime, or the compiler's group table) installs a
// resolver; without one, every group is unknown.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

namespace symmflow {

using GroupSizeResolver = std::function<std::optional<int64_t>(std::string_view group)>;

// Installs `resolver` for the calling thread's scope until the returned guard dies.
class ScopedGroupSizeResolver {
 public:
  explicit ScopedGroupSizeResolver(GroupSizeResolver resolver);
  ~ScopedGroupSizeResolver();
  ScopedGroupSizeResolver(const ScopedGroupSizeResolver&) = delete;
  ScopedGroupSizeResolver& operator=(const ScopedGroupSizeResolver&) = delete;

 private:
  GroupSizeResolver previous_;
};

// The size of `group`; throws InvalidUsage "unknown group 'x'" naming `op` when unresolved.
int64_t resolve_group_size(std::string_view op, std::string_view group);

}  // namespace symmflow

// Thread-local group-size resolvers (see group_size.hpp); scopes nest.
#include "symmflow/ops/group_size.hpp"

#include "symmflow/core/error.hpp"

namespace symmflow {

namespace {
thread_local GroupSizeResolver current_resolver;
}

ScopedGroupSizeResolver::ScopedGroupSizeResolver(GroupSizeResolver resolver)
    : previous_(std::move(current_resolver)) {
  current_resolver = std::move(resolver);
}

ScopedGroupSizeResolver::~ScopedGroupSizeResolver() { current_resolver = std::move(previous_); }

int64_t resolve_group_size(std::string_view op, std::string_view group) {
  std::optional<int64_t> size = current_resolver ? current_resolver(group) : std::nullopt;
  SF_CHECK(size.has_value(), "{}: unknown group '{}'", op, group);
  return *size;
}

}  // namespace symmflow

// Finding functional / in-place / out variants of one op family (internal to the registry).
#pragma once

#include <vector>

#include "symmflow/ops/registry.hpp"

namespace symmflow {

struct VariantLink {
  OpDef* functional = nullptr;
  OpDef* inplace = nullptr;
  OpDef* out = nullptr;
};

// Groups ops of one namespace into families. Throws InvalidUsage when names say two ops are
// variants of each other but their arguments disagree and no other candidate fits.
std::vector<VariantLink> find_variant_links(const std::vector<OpDef*>& ops);

}  // namespace symmflow

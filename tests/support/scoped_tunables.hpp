// Test support: tunables overridden for a scope (restored even when the scope throws).
#pragma once

#include "symmflow/runtime/tunables.hpp"

namespace symmflow::testing {

class ScopedTunables {
 public:
  explicit ScopedTunables(const Tunables& t) : saved_(tunables()) { set_tunables(t); }
  ~ScopedTunables() { set_tunables(saved_); }
  ScopedTunables(const ScopedTunables&) = delete;
  ScopedTunables& operator=(const ScopedTunables&) = delete;

 private:
  Tunables saved_;
};

// The tunables in force with collective_matmul_min_bytes 0: decompose_collective_matmul takes the
// small graphs of the tests (Note [when to decompose]).
inline Tunables decompose_every_size() {
  Tunables t = tunables();
  t.collective_matmul_min_bytes = 0;
  return t;
}

}  // namespace symmflow::testing

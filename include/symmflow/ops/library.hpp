// Libraries: how a namespace of ops is defined and implemented, in the style of TORCH_LIBRARY.
//
//   SYMMFLOW_LIBRARY(mylib, m) {
//     m.def("scale(Tensor x, float s) -> Tensor", same_as_arg("x"));
//     m.register_symm_mem_args("scale", {"x"});   // needs a `str group_name` argument
//     m.def("twice(Tensor x) -> Tensor", same_as_arg("x"), {Tag::pointwise});
//     m.tag("scale", {Tag::one_sided});             // or tag after def (Note [op tags])
//   }
//   SYMMFLOW_LIBRARY_IMPL(mylib, cpu, m) { m.impl("scale", my_cpu_kernel); }
//
// The macros record a registration function; nothing runs during static initialisation. The
// registry runs pending registrations on first access (Registry::global()) and after load_plugin,
// so a rule violation surfaces as a symmflow::Error rather than a crash at load time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "symmflow/ops/registry.hpp"

namespace symmflow {

class Library {
 public:
  Library(Registry& registry, std::string ns, std::optional<Backend> backend = std::nullopt);
  const std::string& ns() const { return ns_; }

  // Schema text without namespace ("add.Tensor(...) -> Tensor"); `shape_fn` may be empty only
  // for ops that return ().
  Library& def(std::string_view schema, ShapeFn shape_fn = {}, TagSet tags = {});
  // Declares tags of an op (Note [op tags] in registry.hpp); inferred tags are refused.
  Library& tag(std::string_view name, TagSet tags);
  // Declares how a communication op moves data, which `explain` prints (OpExchange in
  // registry.hpp): m.exchange("all_gather_out", "pull", "barrier, read every peer's input, barrier").
  Library& exchange(std::string_view name, std::string algorithm, std::string why);
  // Names are relative to the namespace ("add.Tensor"). The two-argument form needs the backend
  // given by SYMMFLOW_LIBRARY_IMPL.
  Library& impl(std::string_view name, Backend backend, Kernel kernel);
  Library& impl(std::string_view name, Kernel kernel);
  // What this library's backend kernel of `name` takes (Note [kernel checks] in registry.hpp);
  // needs SYMMFLOW_LIBRARY_IMPL's backend and the kernel registered first.
  Library& kernel_check(std::string_view name, KernelCheck check);
  // A check of every kernel of this namespace on the block's backend (Registry::backend_check).
  Library& backend_check(KernelCheck check);
  Library& register_symm_mem_args(std::string_view name, std::vector<std::string> args);
  Library& register_group_arg(std::string_view name, std::string arg);

 private:
  std::string qualify(std::string_view name) const;
  Registry& registry_;
  std::string ns_;
  std::optional<Backend> backend_;
};

namespace detail {
using LibraryInit = void (*)(Library&);
// Queues a registration; returns a dummy for static initialisation.
int queue_library(const char* ns, std::optional<Backend> backend, LibraryInit init,
                  const char* file, int line);
// Runs every queued registration; errors are collected and thrown as one InvalidUsage.
void run_pending_libraries(Registry& registry);
}  // namespace detail

// Loads a plugin shared library and runs the registrations it queued. Throws InvalidUsage naming
// the path when it cannot be opened or when a registration breaks a rule.
void load_plugin(const std::string& path);

}  // namespace symmflow

#define SYMMFLOW_CONCAT_INNER(a, b) a##b
#define SYMMFLOW_CONCAT(a, b) SYMMFLOW_CONCAT_INNER(a, b)

#define SYMMFLOW_LIBRARY(ns, m)                                                          \
  static void SYMMFLOW_CONCAT(symmflow_library_init_##ns##_, __LINE__)(::symmflow::Library&); \
  static const int SYMMFLOW_CONCAT(symmflow_library_reg_##ns##_, __LINE__) =             \
      ::symmflow::detail::queue_library(#ns, std::nullopt,                               \
                                        &SYMMFLOW_CONCAT(symmflow_library_init_##ns##_, __LINE__), \
                                        __FILE__, __LINE__);                             \
  static void SYMMFLOW_CONCAT(symmflow_library_init_##ns##_, __LINE__)(::symmflow::Library & m)

#define SYMMFLOW_LIBRARY_IMPL(ns, backend, m)                                                  \
  static void SYMMFLOW_CONCAT(symmflow_impl_init_##ns##_##backend##_, __LINE__)(::symmflow::Library&); \
  static const int SYMMFLOW_CONCAT(symmflow_impl_reg_##ns##_##backend##_, __LINE__) =         \
      ::symmflow::detail::queue_library(                                                      \
          #ns, ::symmflow::Backend::backend,                                                  \
          &SYMMFLOW_CONCAT(symmflow_impl_init_##ns##_##backend##_, __LINE__), __FILE__, __LINE__); \
  static void SYMMFLOW_CONCAT(symmflow_impl_init_##ns##_##backend##_, __LINE__)(::symmflow::Library & m)

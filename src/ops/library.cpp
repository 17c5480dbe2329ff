// Libraries, deferred registration and plugins. Contract: SYMMFLOW_LIBRARY / _IMPL only queue a
// function during static initialisation; run_pending_libraries runs every queued definition
// library before any implementation library (so a plugin may def and impl in one file), then
// links variants of each namespace touched. Errors of all queued libraries are collected and
// thrown together, each prefixed with the file:line of its SYMMFLOW_LIBRARY block.
#include "symmflow/ops/library.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

#include <fmt/format.h>

namespace symmflow {

namespace {
struct PendingLibrary {
  std::string ns;
  std::optional<Backend> backend;
  detail::LibraryInit init;
  std::string where;
};

std::mutex& pending_mutex() {
  static std::mutex m;
  return m;
}
std::vector<PendingLibrary>& pending() {
  static std::vector<PendingLibrary> p;
  return p;
}
std::atomic<bool> has_pending{false};  // lets Registry::global() skip the locks when idle
}  // namespace

Library::Library(Registry& registry, std::string ns, std::optional<Backend> backend)
    : registry_(registry), ns_(std::move(ns)), backend_(backend) {}

std::string Library::qualify(std::string_view name) const {
  if (name.find("::") != std::string_view::npos) return std::string(name);
  return fmt::format("{}::{}", ns_, name);
}

Library& Library::def(std::string_view schema, ShapeFn shape_fn, TagSet tags) {
  registry_.def(ns_, schema, std::move(shape_fn), tags);
  return *this;
}

Library& Library::tag(std::string_view name, TagSet tags) {
  registry_.tag(qualify(name), tags);
  return *this;
}

Library& Library::exchange(std::string_view name, std::string algorithm, std::string why) {
  registry_.exchange(qualify(name), {std::move(algorithm), std::move(why)});
  return *this;
}

Library& Library::impl(std::string_view name, Backend backend, Kernel kernel) {
  registry_.impl(qualify(name), backend, std::move(kernel));
  return *this;
}

Library& Library::impl(std::string_view name, Kernel kernel) {
  SF_CHECK(backend_.has_value(),
           "impl('{}') without a backend: use SYMMFLOW_LIBRARY_IMPL or pass the backend", name);
  return impl(name, *backend_, std::move(kernel));
}

Library& Library::kernel_check(std::string_view name, KernelCheck check) {
  SF_CHECK(backend_.has_value(), "kernel_check('{}') without a backend: use SYMMFLOW_LIBRARY_IMPL",
           name);
  registry_.kernel_check(qualify(name), *backend_, std::move(check));
  return *this;
}

Library& Library::backend_check(KernelCheck check) {
  SF_CHECK(backend_.has_value(), "backend_check without a backend: use SYMMFLOW_LIBRARY_IMPL");
  registry_.backend_check(ns_, *backend_, std::move(check));
  return *this;
}

Library& Library::register_symm_mem_args(std::string_view name, std::vector<std::string> args) {
  registry_.register_symm_mem_args(qualify(name), std::move(args));
  return *this;
}

Library& Library::register_group_arg(std::string_view name, std::string arg) {
  registry_.register_group_arg(qualify(name), std::move(arg));
  return *this;
}

namespace detail {

int queue_library(const char* ns, std::optional<Backend> backend, LibraryInit init,
                  const char* file, int line) {
  std::lock_guard lock(pending_mutex());
  pending().push_back({ns, backend, init, fmt::format("{}:{}", file, line)});
  has_pending.store(true, std::memory_order_release);
  return 0;
}

void run_pending_libraries(Registry& registry) {
  if (!has_pending.load(std::memory_order_acquire)) return;
  // A library's init may look ops up through Registry::global(): that nested call returns at
  // once. Other threads wait on run_mutex until the whole batch is registered and linked, and
  // has_pending drops only then, so no thread ever sees an op without its kernels.
  static thread_local bool running = false;
  if (running) return;
  static std::mutex run_mutex;
  std::lock_guard run_lock(run_mutex);
  running = true;
  struct Reset {
    ~Reset() { running = false; }
  } reset;
  std::string errors;
  std::set<std::string> touched;
  for (;;) {
    std::vector<PendingLibrary> batch;
    {
      std::lock_guard lock(pending_mutex());
      batch.swap(pending());
    }
    if (batch.empty()) break;
    std::stable_partition(batch.begin(), batch.end(),
                          [](const PendingLibrary& p) { return !p.backend.has_value(); });
    for (const PendingLibrary& p : batch) {
      try {
        Library lib(registry, p.ns, p.backend);
        p.init(lib);
        touched.insert(p.ns);
      } catch (const Error& e) {
        errors += fmt::format("{}{}: {}", errors.empty() ? "" : "\n", p.where, e.what());
      }
    }
  }
  for (const std::string& ns : touched) {
    try {
      registry.link_variants(ns);
    } catch (const Error& e) {
      errors += fmt::format("{}namespace '{}': {}", errors.empty() ? "" : "\n", ns, e.what());
    }
  }
  {
    std::lock_guard lock(pending_mutex());
    if (pending().empty()) has_pending.store(false, std::memory_order_release);
  }
  if (!errors.empty()) throw Error(ErrorCode::InvalidUsage, errors);
}

}  // namespace detail

void load_plugin(const std::string& path) {
  Registry& registry = Registry::global();  // built-in libraries first
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = dlerror();
    invalid_usage("cannot load plugin '{}': {}", path, why ? why : "unknown error");
  }
  try {
    detail::run_pending_libraries(registry);
  } catch (const Error& e) {
    invalid_usage("plugin '{}' failed to register its ops:\n{}", path, e.what());
  }
}

}  // namespace symmflow

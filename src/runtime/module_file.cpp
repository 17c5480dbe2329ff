// Finding and loading symmflow's modules (module_file.hpp).
#include "runtime/module_file.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>

#include "symmflow/core/error.hpp"

namespace symmflow::runtime_detail {

std::string module_path(const ModuleFile& m) {
  if (const char* env = std::getenv(m.env); env && *env) return env;
  Dl_info info{};
  std::string dir = ".";
  if (::dladdr(reinterpret_cast<void*>(&module_path), &info) && info.dli_fname) {
    const std::string self = info.dli_fname;
    const size_t slash = self.rfind('/');
    if (slash != std::string::npos) dir = self.substr(0, slash);
  }
  return dir + "/" + m.file;
}

void load_module(const ModuleFile& m, std::string_view what) {
  const std::string path = module_path(m);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (!m.built && !std::getenv(m.env)) {
      invalid_usage("{}: this symmflow was built without {} (no {}{})", what, m.feature, path,
                    m.build_hint);
    }
    invalid_usage("{}: {} {} does not exist ({} names another path)", what, m.name, path, m.env);
  }
  if (!::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    const char* why = ::dlerror();
    invalid_usage("{}: loading {} {} failed: {}{}", what, m.name, path,
                  why ? why : "unknown error", m.load_hint);
  }
}

}  // namespace symmflow::runtime_detail

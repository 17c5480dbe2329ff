// Graph files for the compiler commands.
#include "graph_file.hpp"

#include <fstream>
#include <sstream>

#include "symmflow/core/error.hpp"
#include "symmflow/ir/verify.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::tool {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  SF_CHECK(in.good(), "cannot read '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<ir::Graph> load_graph(const std::string& path, int world_size) {
  SF_CHECK(world_size >= 1, "--ranks must be at least 1 (got {})", world_size);
  return ir::parse_graph(read_file(path), {path, world_size});
}

std::shared_ptr<const passes::Plan> compile_file(const std::string& path, int world_size,
                                                 const std::vector<std::string>& plugins,
                                                 const passes::CompileOptions& options) {
  for (const std::string& p : plugins) load_plugin(p);
  SF_CHECK(world_size >= 1, "--ranks must be at least 1 (got {})", world_size);
  std::string source = read_file(path);
  std::unique_ptr<ir::Graph> g = ir::parse_graph(source, {path, world_size});
  ir::verify_or_throw(*g, path, source);
  return passes::compile(std::move(g), options);
}

}  // namespace symmflow::tool

// Graph files for the compiler commands.
#include "graph_file.hpp"

#include <fstream>
#include <sstream>

#include "symmflow/core/error.hpp"

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

}  // namespace symmflow::tool

// Reading a graph file for the compiler commands (opt, compile, explain, run).
#pragma once

#include <memory>
#include <string>

#include "symmflow/ir/text.hpp"

namespace symmflow::tool {

std::string read_file(const std::string& path);
// Parses `path` (plugins must be loaded first); errors point at the file's lines.
std::unique_ptr<ir::Graph> load_graph(const std::string& path, int world_size);

}  // namespace symmflow::tool

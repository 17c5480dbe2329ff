// Reading a graph file for the compiler commands (opt, compile, explain, run).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "symmflow/ir/text.hpp"
#include "symmflow/passes/pipeline.hpp"

namespace symmflow::tool {

std::string read_file(const std::string& path);
// Parses `path` (plugins must be loaded first); errors point at the file's lines.
std::unique_ptr<ir::Graph> load_graph(const std::string& path, int world_size);
// Loads `plugins`, parses and verifies `path` (diagnostics point at its lines) and compiles it.
std::shared_ptr<const passes::Plan> compile_file(const std::string& path, int world_size,
                                                 const std::vector<std::string>& plugins,
                                                 const passes::CompileOptions& options = {});

}  // namespace symmflow::tool

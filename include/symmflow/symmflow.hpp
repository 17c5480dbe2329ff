// symmflow's front door: the one header a program, the CLI or a language binding includes to
// parse, compile, explain and run distributed tensor programs over symmetric memory.
//
//   #include "symmflow/symmflow.hpp"
//   namespace sf = symmflow::api;
//
//   sf::Program prog = sf::Program::parse_file("examples/tp_mlp_small.sf", 2);
//   sf::CompiledProgram compiled = sf::compile(prog);   // ProgramError: file:line:col diagnostics
//   const sf::ExplainData& plan = compiled.explain();   // pools, buffers, copies, collectives
//   std::string json = compiled.explain_json();
//   sf::run_threads(2, [&](sf::Rank& rank) {            // or sf::join_mpi() under mpirun
//     sf::Session session(compiled, rank, {"cpu"});     // collective: pools allocated once
//     std::vector<symmflow::Tensor> in;
//     for (size_t i = 0; i < session.inputs().size(); ++i) {
//       in.push_back(session.input_buffer(i));          // write inputs here: zero copies
//       /* fill in.back() */
//     }
//     sf::RunOptions views;
//     views.outputs = sf::Outputs::views;               // outputs in the plan's memory
//     std::vector<symmflow::Tensor> out = session.run(in, views);
//     session.last_stats().copies;                      // what the plan had to copy
//   });
//
// Parts: programs, plugins and compile (api/program.hpp); building a program node by node and
// shape inference for bindings (api/builder.hpp); the explain data and its JSON
// (api/explain.hpp); ranks and sessions (api/session.hpp); the op catalogue, tunables and the
// eager demo block (api/catalogue.hpp); the collective benchmark (api/bench.hpp). Tensors and
// errors are the core's (symmflow::Tensor, TensorView, DType, symmflow::Error). Everything a
// caller can get wrong is a symmflow::Error naming what was wrong. docs/api.md has more.
#pragma once

#include "symmflow/api/bench.hpp"
#include "symmflow/api/builder.hpp"
#include "symmflow/api/catalogue.hpp"
#include "symmflow/api/explain.hpp"
#include "symmflow/api/program.hpp"
#include "symmflow/api/session.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/core/tensor.hpp"

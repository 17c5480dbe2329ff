// The front door: a two-layer tensor-parallel MLP compiled once, run on N rank threads (argv[1]),
// inputs written into the session's buffers, every output element checked against the interpreter.
#include <cstdio>
#include <cstdlib>
#include "symmflow/symmflow.hpp"
namespace sf = symmflow::api;

int main(int argc, char** argv) try {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  sf::Program program = sf::Program::parse(R"(group tp
    graph mlp(x: f32[8, 32], w0: f32[32, 32], w1: f32[32, 32]) {
      h0 = aten::mm(x, w0)
      r0 = symm_mem::one_shot_all_reduce(h0, "sum", "tp")
      h1 = aten::mm(r0, w1)
      r1 = symm_mem::one_shot_all_reduce(h1, "sum", "tp")
      return r1
    })", {"mlp.sf", ranks});
  sf::CompiledProgram compiled = sf::compile(program);
  sf::run_threads(ranks, [&](sf::Rank& rank) {
    sf::Session session(compiled, rank);
    std::vector<symmflow::Tensor> inputs;
    for (size_t i = 0; i < session.inputs().size(); ++i) {
      inputs.push_back(session.input_buffer(i));
      for (int64_t e = 0; e < inputs[i].numel(); ++e)
        inputs[i].data<float>()[e] = float((e * 7 + int64_t(i) + rank.rank()) % 11) / 32.0f;
    }
    std::vector<symmflow::Tensor> got = session.run(inputs);
    std::vector<symmflow::Tensor> want = program.interpret(inputs);  // collective too
    sf::OutputComparison c = sf::compare_output(program, 0, got[0], want[0], "of run_mlp");
    if (c.mismatch) throw symmflow::Error(symmflow::ErrorCode::Internal, *c.mismatch);
    if (rank.rank() == 0)
      std::printf("run_mlp: OK on %d ranks, %ld elements, %zu copies\n", ranks,
                  long(want[0].numel()), session.last_stats().copies);
  });
  return 0;
} catch (const symmflow::Error& e) {
  std::fprintf(stderr, "run_mlp: %s\n", e.what());
  return 1;
}

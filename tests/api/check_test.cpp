// `symmflow run --check` for mutated graph inputs (src/api/check.cpp): which inputs a program
// mutates (in place, or written back by the plan), and their contents after a
// compiled run against the interpreter's, element for element, with the mismatch text of a
// deliberately wrong write-back.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "symmflow/symmflow.hpp"

namespace sf = symmflow::api;
using symmflow::DType;
using symmflow::Tensor;

namespace {

std::string example(const std::string& name) {
  return std::string(SYMMFLOW_EXAMPLES_DIR) + "/" + name;
}

Tensor filled(const symmflow::Shape& shape, int rank, int input) {
  std::vector<float> v(size_t(symmflow::numel(shape)));
  for (size_t e = 0; e < v.size(); ++e) v[e] = float((int(e) * 5 + rank * 3 + input) % 13) / 8.0f;
  return Tensor::from_vector(v, shape);
}

Tensor clone(const Tensor& t) {  // f32 inputs
  std::vector<float> v;
  for (double x : t.to_doubles()) v.push_back(float(x));
  return Tensor::from_vector(v, t.shape());
}

}  // namespace

TEST(ApiCheck, MutatedInputsAreThoseWrittenInPlaceOrWrittenBack) {
  sf::CompiledProgram compiled = sf::compile(sf::Program::parse_file(example("inplace_input.sf"), 2));
  EXPECT_EQ(sf::mutated_inputs(compiled), (std::vector<size_t>{0, 1}));
  sf::CompiledProgram second = sf::compile(sf::Program::parse(R"sf(graph g(x: f32[8], y: f32[8]) {
  z = aten::add.Tensor(x, y)
  aten::cos_(y)
  return z
})sf"));
  EXPECT_EQ(sf::mutated_inputs(second), (std::vector<size_t>{1}));
  sf::CompiledProgram none = sf::compile(sf::Program::parse_file(example("input_allreduce.sf"), 2));
  EXPECT_TRUE(sf::mutated_inputs(none).empty());
}

// At 2 ranks, x (all-reduced in place) and y (add_) end as the interpreter leaves them; the same
// comparison of a wrong write-back (one element changed) reports the input, element and values.
TEST(ApiCheck, MutatedInputsMatchEagerAndAWrongWriteBackIsReported) {
  sf::Program program = sf::Program::parse_file(example("inplace_input.sf"), 2);
  sf::CompiledProgram compiled = sf::compile(program);
  std::vector<std::string> mismatches(2), wrong(2);
  sf::run_threads(2, [&](sf::Rank& rank) {
    sf::Session session(compiled, rank);
    std::vector<Tensor> compiled_inputs, eager_inputs;
    for (int i = 0; i < 2; ++i) {
      compiled_inputs.push_back(filled({32, 64}, rank.rank(), i));
      eager_inputs.push_back(filled({32, 64}, rank.rank(), i));
    }
    Tensor before_x = clone(compiled_inputs[0]);
    session.run(compiled_inputs);
    program.interpret(eager_inputs);  // mutates eager_inputs as eager code would
    std::string context = "on rank " + std::to_string(rank.rank());
    for (size_t i : sf::mutated_inputs(compiled)) {
      sf::OutputComparison c =
          sf::compare_mutated_input(compiled, i, compiled_inputs[i], eager_inputs[i], context);
      if (c.mismatch) mismatches[size_t(rank.rank())] += *c.mismatch;
    }
    // The all-reduce changed x: a write-back that was skipped would fail.
    sf::OutputComparison skipped =
        sf::compare_mutated_input(compiled, 0, before_x, eager_inputs[0], context);
    EXPECT_TRUE(skipped.mismatch.has_value());
    Tensor bad = clone(compiled_inputs[1]);
    bad.data<float>()[3] += 1.0f;
    sf::OutputComparison c = sf::compare_mutated_input(compiled, 1, bad, eager_inputs[1], context);
    wrong[size_t(rank.rank())] = c.mismatch.value_or("(no mismatch)");
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(mismatches[size_t(r)], "") << "rank " << r;
    EXPECT_EQ(wrong[size_t(r)].rfind("input 1 ('y', mutated, 2 rounding ops deep) on rank " +
                                         std::to_string(r) + " element 3: got ",
                                     0),
              0u)
        << wrong[size_t(r)];
  }
}

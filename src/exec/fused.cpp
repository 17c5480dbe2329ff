// run_fused: STUB until the fused executor (branch passes-a) lands; replace this whole file.
// Interprets the body op by op through the registry and copies its results into `outputs`.
#include "symmflow/exec/fused.hpp"

#include "exec/util.hpp"
#include "symmflow/exec/interpret.hpp"

namespace symmflow::exec {

void run_fused(const ir::Graph& body, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  std::vector<Tensor> results = interpret(body, std::vector<Tensor>(inputs.begin(), inputs.end()));
  SF_CHECK(results.size() == outputs.size(), "fused: body gives {} results for {} outputs",
           results.size(), outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) detail::copy_tensor(outputs[i], results[i]);
}

}  // namespace symmflow::exec

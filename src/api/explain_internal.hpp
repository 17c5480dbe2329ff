// Inside the api: the explain data of a plan (explain.cpp, the one api file that reads Plan
// internals; keep it so, so that a change of the Plan touches the api in one place).
#pragma once

#include "symmflow/api/explain.hpp"
#include "symmflow/passes/plan.hpp"

namespace symmflow::api {

ExplainData make_explain(const passes::Plan& plan, int world_size);

}  // namespace symmflow::api

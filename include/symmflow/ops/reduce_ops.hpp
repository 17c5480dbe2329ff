// Note [reduce ops]
// The reduce ops of the catalogue's reductions, named as torch.distributed names them: "sum",
// "avg", "max", "min". Every op with a `str reduce_op` argument takes exactly these, and binding
// its arguments refuses any other ("unknown reduce_op 'prod' (valid: sum, avg, max, min)"), for
// eager calls and graph builders alike; a compiler or bridge asks the registry (by building the
// node) instead of keeping a list of its own. The kernels map the name to their own enum.
#pragma once

#include <span>
#include <string_view>

namespace symmflow {

std::span<const std::string_view> reduce_op_names();
bool is_reduce_op(std::string_view name);

}  // namespace symmflow

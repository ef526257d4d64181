// The math of each optimizer update, applied in place to a variable and its
// slots. Used by the variable shard actor (where updates really happen) and by
// the in-memory variable service of tests.
#pragma once

#include <vector>

#include "kernels/variable_service.h"

namespace sf {

// Applies req to vars (the variable first, then its slots, as in
// req.var_ids). Returns InvalidArgument naming the optimizer and the shapes or
// dtypes that do not match; vars are unchanged then.
Status ApplyOptimizerUpdate(const ApplyRequest& req, const std::vector<Tensor*>& vars);

}  // namespace sf

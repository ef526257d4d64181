// PLACEHOLDER: replaced by the optimizer math.
#include "kernels/optimizer_math.h"
namespace sf {
Status ApplyOptimizerUpdate(const ApplyRequest& req, const std::vector<Tensor*>&) {
  return Unimplemented("optimizer " + req.optimizer);
}
}  // namespace sf

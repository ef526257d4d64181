// PLACEHOLDER: replaced by the Training ops implementation.
#include "graph/op_registry.h"
namespace sf {
void RegisterTrainingOps(OpRegistry&) {}
}  // namespace sf

// PLACEHOLDER: replaced by the NN ops implementation.
#include "graph/op_registry.h"
namespace sf {
void RegisterNNOps(OpRegistry&) {}
}  // namespace sf

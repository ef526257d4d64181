// PLACEHOLDER: replaced by the State ops implementation.
#include "graph/op_registry.h"
namespace sf {
void RegisterStateOps(OpRegistry&) {}
}  // namespace sf

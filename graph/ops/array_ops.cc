// PLACEHOLDER: replaced by the Array ops implementation.
#include "graph/op_registry.h"
namespace sf {
void RegisterArrayOps(OpRegistry&) {}
}  // namespace sf

// PLACEHOLDER: replaced by the Random ops implementation.
#include "graph/op_registry.h"
namespace sf {
void RegisterRandomOps(OpRegistry&) {}
}  // namespace sf

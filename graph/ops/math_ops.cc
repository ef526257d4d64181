// PLACEHOLDER: replaced by the Math ops implementation.
#include "graph/op_registry.h"
namespace sf {
void RegisterMathOps(OpRegistry&) {}
}  // namespace sf

#include "kernels/optimizer_spec.h"

namespace sf {

const OptimizerSpec* FindOptimizer(std::string_view name) {
  for (const OptimizerSpec& s : kOptimizers)
    if (name == s.name) return &s;
  return nullptr;
}

const OptimizerSpec* FindOptimizerByOp(std::string_view op) {
  for (const OptimizerSpec& s : kOptimizers)
    if (op == s.apply_op || (s.sparse_op && op == s.sparse_op)) return &s;
  return nullptr;
}

Result<OptimizerKind> ParseOptimizer(const std::string& name) {
  if (const OptimizerSpec* s = FindOptimizer(name)) return s->kind;
  return InvalidArgument("unknown optimizer '" + name + "' (" + OptimizerNames() + ")");
}

std::string OptimizerNames(bool with_sparse_op) {
  std::string out;
  const char* last = nullptr;  // written once the next is known, to put "or" before the last
  for (const OptimizerSpec& s : kOptimizers) {
    if (with_sparse_op && !s.sparse_op) continue;
    if (last) out += out.empty() ? last : std::string(", ") + last;
    last = s.name;
  }
  if (last) out += out.empty() ? last : std::string(" or ") + last;
  return out;
}

}  // namespace sf

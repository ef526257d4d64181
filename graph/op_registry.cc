#include "graph/op_registry.h"

#include <algorithm>

#include "kernels/run_counters.h"

namespace sf {

const Tensor* InferenceContext::input_constant(int i) const {
  const Node& p = n_.inputs[i].op();
  if (p.op != "Const") return nullptr;
  const AttrValue* v = p.attrs.Find("value");
  return v ? std::get_if<Tensor>(v) : nullptr;
}

void InferenceContext::set_output(int i, DType dtype, PartialShape shape) {
  if (static_cast<int>(dtypes_.size()) <= i) {
    dtypes_.resize(i + 1, DType::kInvalid);
    shapes_.resize(i + 1);
  }
  dtypes_[i] = dtype;
  shapes_[i] = std::move(shape);
}

Status InferenceContext::RequireSameDTypes() const {
  for (int i = 1; i < num_inputs(); ++i) {
    if (input_dtype(i) != input_dtype(0))
      return InvalidArgument(std::string("input 0 is ") + DTypeName(input_dtype(0)) + " but input " +
                             std::to_string(i) + " is " + DTypeName(input_dtype(i)));
  }
  return Status::OK();
}

Status InferenceContext::RequireRank(int i, int r) const {
  const PartialShape& s = input_shape(i);
  if (s.rank_known() && s.rank() != r)
    return InvalidArgument("input " + std::to_string(i) + " must have rank " + std::to_string(r) +
                           ", got shape " + s.ToString());
  return Status::OK();
}

Status OpRegistry::Register(OpDef def) {
  if (def.name.empty()) return InvalidArgument("an op needs a name");
  if (ops_.count(def.name)) return InvalidArgument("op '" + def.name + "' is registered twice");
  if (def.differentiable && !def.grad_fn)
    return InvalidArgument("op '" + def.name + "' is differentiable but has no gradient function");
  if (!def.shape_fn) return InvalidArgument("op '" + def.name + "' has no shape function");
  for (const AttrDef& a : def.attrs)
    if ((a.path != PathAttr::kNone || a.state != StateAttr::kNone) &&
        !std::holds_alternative<std::string>(a.default_value))
      return InvalidArgument("op '" + def.name + "': attribute '" + a.name + "' names " +
                             (a.path != PathAttr::kNone ? "files" : "shared state") +
                             ", so it must be a string attribute");
  ops_.emplace(def.name, std::move(def));
  return Status::OK();
}

const OpDef* OpRegistry::Find(const std::string& name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpRegistry::Names() const {
  std::vector<std::string> out;
  for (const auto& kv : ops_) out.push_back(kv.first);
  return out;
}

bool IsRuntimeAttr(const std::string& name) { return !name.empty() && name[0] == '_'; }

Status CheckAttrsDeclared(const OpDef& def, const AttrMap& attrs) {
  for (const auto& kv : attrs.all()) {
    if (IsRuntimeAttr(kv.first)) continue;
    if (std::any_of(def.attrs.begin(), def.attrs.end(), [&](const AttrDef& a) { return a.name == kv.first; }))
      continue;
    std::string known;
    for (const AttrDef& a : def.attrs) known += (known.empty() ? "" : ", ") + a.name;
    return InvalidArgument("unknown attribute '" + kv.first + "' (" + def.name +
                           (known.empty() ? " takes no attributes)" : " takes: " + known + ")"));
  }
  return Status::OK();
}

void ApplyAttrDefaults(const OpDef& def, AttrMap* attrs) {
  for (const AttrDef& a : def.attrs) {
    if (a.required || attrs->Has(a.name)) continue;
    if (const DType* t = std::get_if<DType>(&a.default_value); t && *t == DType::kInvalid) continue;
    attrs->Set(a.name, a.default_value);
  }
}

Status UnchangedShape(InferenceContext& c) {
  c.set_output(0, c.input_dtype(0), c.input_shape(0));
  return Status::OK();
}

Result<PartialShape> BroadcastShapes(const PartialShape& a, const PartialShape& b) {
  if (!a.rank_known() || !b.rank_known()) return PartialShape::Unknown();
  const int r = std::max(a.rank(), b.rank());
  Shape out(r);
  for (int i = 0; i < r; ++i) {
    const int ia = a.rank() - r + i, ib = b.rank() - r + i;
    const int64_t da = ia >= 0 ? a.dim(ia) : 1, db = ib >= 0 ? b.dim(ib) : 1;
    if (da == 1) out[i] = db;
    else if (db == 1) out[i] = da;
    else if (da == -1 || db == -1) out[i] = da == -1 ? db : da;
    else if (da == db) out[i] = da;
    else
      return InvalidArgument("incompatible shapes for broadcasting: " + a.ToString() + " and " +
                             b.ToString());
  }
  return PartialShape(out);
}

int64_t SeedFromNodeName(Graph& g, const std::string& op) { return NodeNameSeed(g.ScopedName(op)); }

Status RegisterStandardOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(RegisterCoreOps(reg));
  SF_RETURN_IF_ERROR(RegisterArrayOps(reg));
  SF_RETURN_IF_ERROR(RegisterShapeOps(reg));
  SF_RETURN_IF_ERROR(RegisterMathOps(reg));
  SF_RETURN_IF_ERROR(RegisterNNOps(reg));
  SF_RETURN_IF_ERROR(RegisterStateOps(reg));
  SF_RETURN_IF_ERROR(RegisterCheckpointOps(reg));
  SF_RETURN_IF_ERROR(RegisterRandomOps(reg));
  SF_RETURN_IF_ERROR(RegisterTrainingOps(reg));
  SF_RETURN_IF_ERROR(RegisterReplicationOps(reg));
  SF_RETURN_IF_ERROR(RegisterControlFlowOps(reg));
  SF_RETURN_IF_ERROR(RegisterQueueOps(reg));
  SF_RETURN_IF_ERROR(RegisterSendRecvOps(reg));
  SF_RETURN_IF_ERROR(RegisterEmbeddingOps(reg));
  SF_RETURN_IF_ERROR(RegisterReaderOps(reg));
  SF_RETURN_IF_ERROR(RegisterChunkQueueOps(reg));
  SF_RETURN_IF_ERROR(RegisterInteractionOps(reg));
  return Status::OK();
}

}  // namespace sf

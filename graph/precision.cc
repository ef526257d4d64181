#include "shardflow/precision.h"

#include "kernels/cpu_features.h"

namespace sf {

Status CheckComputePrecision(const std::string& precision) {
  if (precision == "fp32") return Status::OK();
  if (precision != "bf16" && precision != "bf16_always")
    return InvalidArgument("unknown precision \"" + precision + "\" (expected fp32, bf16 or bf16_always)");
  return Bf16Supported();
}

Result<int> SetComputePrecision(Graph& g, const std::string& precision) {
  SF_RETURN_IF_ERROR(CheckComputePrecision(precision));
  int set = 0;
  for (int id = 0; id < g.num_nodes(); ++id) {
    Node& n = g.mutable_node(id);
    if (n.op != "MatMul" && n.op != "FusedMatMul" && n.op != "Conv2D" && n.op != "FusedConv2D" &&
        n.op != "Conv2DBackpropInput" && n.op != "Conv2DBackpropFilter")
      continue;
    if (n.output_dtypes.empty() || n.output_dtypes[0] != DType::kFloat32) continue;
    n.attrs.Set("precision", precision);
    ++set;
  }
  return set;
}

}  // namespace sf

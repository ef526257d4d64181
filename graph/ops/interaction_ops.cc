// Feature interaction ops: DotInteraction (DLRM's dot interaction) and its
// gradient, kernels in kernels/cpu/interaction_kernels.cc.
#include "graph/op_registry.h"
#include "shardflow/ops.h"

namespace sf {

namespace {

// dense [n, d] and sparse [n, m, d] of one float dtype.
Status InteractionInputs(InferenceContext& c, int64_t* n, int64_t* m, int64_t* d) {
  for (int i = 0; i < 2; ++i) {
    const DType t = c.input_dtype(i);
    if (t != DType::kFloat32 && t != DType::kFloat64)
      return c.Error("input " + std::to_string(i) + " must be float32 or float64, not " + DTypeName(t));
  }
  SF_RETURN_IF_ERROR(c.RequireSameDTypes());
  const PartialShape& x = c.input_shape(0);
  const PartialShape& s = c.input_shape(1);
  if (x.rank_known() && x.rank() != 2) return c.Error("dense must be [batch, dim], got " + x.ToString());
  if (s.rank_known() && s.rank() != 3) return c.Error("sparse must be [batch, fields, dim], got " + s.ToString());
  *n = x.rank_known() ? x.dim(0) : -1;
  *d = x.rank_known() ? x.dim(1) : -1;
  *m = s.rank_known() ? s.dim(1) : -1;
  if (s.rank_known()) {
    if (*n < 0) *n = s.dim(0);
    else if (s.dim(0) >= 0 && s.dim(0) != *n) return c.Error("dense and sparse differ in batch: " + x.ToString() + " and " + s.ToString());
    if (*d < 0) *d = s.dim(2);
    else if (s.dim(2) >= 0 && s.dim(2) != *d) return c.Error("dense and sparse differ in dim: " + x.ToString() + " and " + s.ToString());
  }
  return Status::OK();
}

}  // namespace

Status RegisterInteractionOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("DotInteraction")
      .InputNames({"dense", "sparse"})
      .Inputs(2)
      .Shape([](InferenceContext& c) -> Status {
        int64_t n, m, d;
        SF_RETURN_IF_ERROR(InteractionInputs(c, &n, &m, &d));
        const int64_t width = (m < 0 || d < 0) ? -1 : d + (m + 1) * m / 2;
        c.set_output(0, c.input_dtype(0), PartialShape(Shape{n, width}));
        return Status::OK();
      })
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        if (!dy[0].valid()) return std::vector<Output>(2);
        const int id = g.AddNode("DotInteractionGrad", {dy[0], n.inputs[0], n.inputs[1]});
        if (id < 0) return std::vector<Output>(2);
        return std::vector<Output>{Output(&g, id, 0), Output(&g, id, 1)};
      })
      .Summary("DLRM's dot interaction of dense [n, d] and sparse [n, m, d]: with v_0 = dense and v_1..v_m "
               "the sparse rows, out [n, d + m(m+1)/2] = [dense, v_i . v_j for i in 1..m, j in 0..i-1] "
               "(the strictly lower triangle of each example's Gram matrix, row by row).")
      .Build()));
  return reg.Register(OpBuilder("DotInteractionGrad")
      .InputNames({"dy", "dense", "sparse"})
      .Inputs(3)
      .Shape([](InferenceContext& c) -> Status {
        c.set_output(0, c.input_dtype(1), c.input_shape(1));
        c.set_output(1, c.input_dtype(2), c.input_shape(2));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("The gradients of DotInteraction with respect to dense and sparse, given dy.")
      .Build());
}

namespace ops {

Output DotInteraction(Graph& g, Output dense, Output sparse) { return g.Add1("DotInteraction", {dense, sparse}); }

}  // namespace ops
}  // namespace sf

// Random ops: RandomUniform, RandomNormal, TruncatedNormal, and TensorFlow's
// candidate samplers LogUniformCandidateSampler and UniformCandidateSampler.
//
// Always deterministic: the values of a node's k-th run depend only on its
// attrs (shape, dtype, seed, distribution parameters) and k, in any graph and
// any process. A builder called with seed 0 (the default) stores a seed
// derived from the node's unique name (SeedFromNodeName), so two initialisers
// without explicit seeds differ, and rebuilding the same graph repeats them.
#include "graph/op_registry.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

// Shape function of the three ops; `params` are the distribution attrs.
ShapeFn RandomShape(std::vector<std::string> params) {
  return [params](InferenceContext& c) -> Status {
    SF_ASSIGN_OR_RETURN(Shape shape, c.Attr<Shape>("shape"));
    SF_ASSIGN_OR_RETURN(DType dtype, c.Attr<DType>("dtype"));
    SF_RETURN_IF_ERROR(c.AttrOr<int64_t>("seed", 0).status());
    for (const std::string& p : params) SF_RETURN_IF_ERROR(c.Attr<double>(p).status());
    if (dtype != DType::kFloat32 && dtype != DType::kFloat64)
      return c.Error(std::string("random ops fill float32 or float64, not ") + DTypeName(dtype));
    for (int64_t d : shape)
      if (d < 0) return c.Error("random op shape " + ShapeString(shape) + " has a negative dim");
    if (params.size() == 2 && params[0] == "minval" &&
        !(c.Attr<double>("minval").value() <= c.Attr<double>("maxval").value()))
      return c.Error("RandomUniform: minval must be <= maxval");
    if (params.size() == 2 && params[1] == "stddev" && !(c.Attr<double>("stddev").value() >= 0))
      return c.Error("stddev must be >= 0");
    c.set_output(0, dtype, PartialShape(shape));
    return Status::OK();
  };
}

Output RandomNode(Graph& g, const std::string& op, const Shape& shape, int64_t seed, DType dtype,
                  const char* p0, double v0, const char* p1, double v1) {
  AttrMap a;
  a.Set("shape", shape);
  a.Set("dtype", dtype);
  a.Set("seed", seed != 0 ? seed : SeedFromNodeName(g, op));
  a.Set(p0, v0);
  a.Set(p1, v1);
  return g.Add1(op, {}, std::move(a));
}

}  // namespace

Status RegisterRandomOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("RandomUniform")
      .RequiredAttr<std::vector<int64_t>>("shape").Attr("dtype", DType::kFloat32)
      .Attr("seed", int64_t{0}).Attr("minval", 0.0).Attr("maxval", 1.0)
      .Inputs(0).Stateful().Repeatable()
      .Shape(RandomShape({"minval", "maxval"})).NotDifferentiable()
      .Summary("Uniform values in [minval, maxval) (attrs shape, dtype, seed).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("RandomNormal")
      .RequiredAttr<std::vector<int64_t>>("shape").Attr("dtype", DType::kFloat32)
      .Attr("seed", int64_t{0}).Attr("mean", 0.0).Attr("stddev", 1.0)
      .Inputs(0).Stateful().Repeatable()
      .Shape(RandomShape({"mean", "stddev"})).NotDifferentiable()
      .Summary("Normal values (attrs shape, dtype, seed, mean, stddev).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("TruncatedNormal")
      .RequiredAttr<std::vector<int64_t>>("shape").Attr("dtype", DType::kFloat32)
      .Attr("seed", int64_t{0}).Attr("mean", 0.0).Attr("stddev", 1.0)
      .Inputs(0).Stateful().Repeatable()
      .Shape(RandomShape({"mean", "stddev"})).NotDifferentiable()
      .Summary("Normal values redrawn until within 2 stddev of the mean.").Build()));
  for (const char* op : {"LogUniformCandidateSampler", "UniformCandidateSampler"}) {
    const bool log_uniform = std::string(op) == "LogUniformCandidateSampler";
    SF_RETURN_IF_ERROR(reg.Register(OpBuilder(op)
        .RequiredAttr<int64_t>("num_true").RequiredAttr<int64_t>("num_sampled").RequiredAttr<bool>("unique")
        .RequiredAttr<int64_t>("range_max").Attr("seed", int64_t{0})
        .Inputs(1).InputNames({"true_classes"}).Stateful().Repeatable()
        .Shape([op](InferenceContext& c) -> Status {
          SF_ASSIGN_OR_RETURN(int64_t num_true, c.Attr<int64_t>("num_true"));
          SF_ASSIGN_OR_RETURN(int64_t num_sampled, c.Attr<int64_t>("num_sampled"));
          SF_ASSIGN_OR_RETURN(bool unique, c.Attr<bool>("unique"));
          SF_ASSIGN_OR_RETURN(int64_t range_max, c.Attr<int64_t>("range_max"));
          SF_RETURN_IF_ERROR(c.AttrOr<int64_t>("seed", 0).status());
          const std::string where = std::string(op) + ": ";
          if (num_true < 1 || num_sampled < 1 || range_max < 1)
            return c.Error(where + "num_true, num_sampled and range_max must be >= 1, got " +
                           std::to_string(num_true) + ", " + std::to_string(num_sampled) + ", " +
                           std::to_string(range_max));
          if (unique && num_sampled > range_max)
            return c.Error(where + "num_sampled (" + std::to_string(num_sampled) + ") must be <= range_max (" +
                           std::to_string(range_max) + ") when unique");
          if (c.input_dtype(0) != DType::kInt64)
            return c.Error(where + "true_classes must be int64, got " + DTypeName(c.input_dtype(0)));
          const PartialShape& t = c.input_shape(0);
          if (t.rank_known() && (t.rank() != 2 || (t.dim(1) >= 0 && t.dim(1) != num_true)))
            return c.Error(where + "true_classes must be [batch_size, num_true = " + std::to_string(num_true) +
                           "], got " + t.ToString());
          c.set_output(0, DType::kInt64, PartialShape({num_sampled}));
          c.set_output(1, DType::kFloat32, t.rank_known() ? PartialShape({t.dim(0), num_true})
                                                          : PartialShape({-1, num_true}));
          c.set_output(2, DType::kFloat32, PartialShape({num_sampled}));
          return Status::OK();
        })
        .NotDifferentiable()
        .Summary(std::string("TensorFlow's ") + (log_uniform ? "log-uniform (Zipfian)" : "uniform") +
                 " candidate sampler: num_sampled classes in [0, range_max) (distinct when unique), and the "
                 "expected counts of true_classes [batch, num_true] (int64) and of the sampled ones.")
        .Build()));
  }
  return Status::OK();
}

namespace ops {

Output RandomUniform(Graph& g, const Shape& shape, double minval, double maxval, int64_t seed,
                     DType dtype) {
  return RandomNode(g, "RandomUniform", shape, seed, dtype, "minval", minval, "maxval", maxval);
}

Output RandomNormal(Graph& g, const Shape& shape, double stddev, int64_t seed, DType dtype,
                    double mean) {
  return RandomNode(g, "RandomNormal", shape, seed, dtype, "mean", mean, "stddev", stddev);
}

Output TruncatedNormal(Graph& g, const Shape& shape, double stddev, int64_t seed, DType dtype,
                       double mean) {
  return RandomNode(g, "TruncatedNormal", shape, seed, dtype, "mean", mean, "stddev", stddev);
}

}  // namespace ops
}  // namespace sf

// A program's own op and kernel run in a Session: the session builds its
// partitions from the kernel registry it is given, not a hidden global one.
#include <catch2/catch.hpp>

#include "shardflow/gradients.h"
#include "shardflow/session.h"
#include "tests/support/cube_op.h"

using namespace sf;

namespace {

bool Contains(const Status& s, const std::string& part) {
  return s.ToString().find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("Session: a program's own op, gradient and kernel run through SessionOptions::kernels", "[session]") {
  OpRegistry ops;
  REQUIRE(testing::RegisterCubeOps(ops).ok());
  KernelRegistry kernels;
  REQUIRE(testing::RegisterCubeKernels(kernels).ok());

  Graph g(ops);
  auto x = ops::Placeholder(g, DType::kFloat32, {3}, "x");
  Output y = g.Add1("Cube", {x}, {}, "y");
  auto loss = ops::Sum(g, y);
  auto dx = Gradients(g, {loss}, {x});
  REQUIRE(dx.ok());
  REQUIRE(g.status().ok());
  FeedMap feeds = {{"x", Tensor::FromVector(std::vector<float>{1, -2, 0.5f}, {3})}};

  SessionOptions so;
  so.kernels = &kernels;
  Session s(g, so);
  auto out = s.Run(feeds, {y.name(), (*dx)[0].name()});
  REQUIRE(out.ok());
  CHECK((*out)[0].ToVector<float>() == std::vector<float>{1, -8, 0.125f});
  CHECK((*out)[1].ToVector<float>() == std::vector<float>{3, 12, 0.75f});

  // The standard kernels alone have none for Cube: the error names the op and node.
  Session plain(g);
  auto missing = plain.Run(feeds, {y.name()});
  REQUIRE(!missing.ok());
  INFO(missing.status().ToString());
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(Contains(missing.status(), "Cube"));
  CHECK(Contains(missing.status(), "'y'"));
}

TEST_CASE("OpRegistry: a duplicate op or a differentiable op without a gradient is an error naming it",
          "[graph]") {
  OpRegistry ops;
  REQUIRE(RegisterStandardOps(ops).ok());
  // The standard set twice: the first duplicate is named.
  Status again = RegisterStandardOps(ops);
  REQUIRE(!again.ok());
  CHECK(Contains(again, "registered twice"));
  Status dup = ops.Register(OpBuilder("MatMul").Inputs(2).Shape(UnchangedShape).NotDifferentiable().Build());
  REQUIRE(!dup.ok());
  CHECK(Contains(dup, "'MatMul'"));
  OpDef no_grad = OpBuilder("Mine").Inputs(1).Shape(UnchangedShape).Build();
  no_grad.differentiable = true;
  Status ng = ops.Register(no_grad);
  REQUIRE(!ng.ok());
  CHECK(Contains(ng, "'Mine'"));
  CHECK(Contains(ng, "no gradient"));
  CHECK(ops.Find("Mine") == nullptr);

  KernelRegistry kernels;
  REQUIRE(testing::RegisterCubeKernels(kernels).ok());
  Status kdup = kernels.Register("Cube", DeviceType::kCPU, DType::kFloat32, MakeFactory<testing::CubeKernel>());
  REQUIRE(!kdup.ok());
  CHECK(Contains(kdup, "Cube"));
}

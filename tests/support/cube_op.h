// A user's own op, as a program outside shardflow would write it with the
// public headers only: "Cube" (y = x^3, gradient 3 x^2 dy), its shape
// function, gradient and float kernel, registered into registries that also
// hold the standard ops and kernels. Used by the tests that run it in a
// Session and on a cluster.
#pragma once

#include "shardflow/kernel.h"
#include "shardflow/op_registry.h"
#include "shardflow/ops.h"

namespace sf::testing {

class CubeKernel : public OpKernel {
 public:
  CubeKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor& y = ctx->allocate_output(0, DType::kFloat32, x.shape());
    y.flat<float>() = x.flat<float>().cube();
  }
};

// The standard ops plus Cube; the first registration error otherwise.
inline Status RegisterCubeOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(RegisterStandardOps(reg));
  return reg.Register(OpBuilder("Cube").Inputs(1).Shape(UnchangedShape)
                          .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
                            Output x = n.inputs[0];
                            Output three = ops::Const(g, 3.0f);
                            return std::vector<Output>{three * x * x * dy[0]};
                          })
                          .Summary("x cubed, elementwise (a test's own op).")
                          .Build());
}

// The standard kernels plus Cube's float kernel.
inline Status RegisterCubeKernels(KernelRegistry& reg) {
  RegisterStandardKernels(reg);
  return reg.Register("Cube", DeviceType::kCPU, DType::kFloat32, MakeFactory<CubeKernel>());
}

}  // namespace sf::testing

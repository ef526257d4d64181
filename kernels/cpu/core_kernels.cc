// Kernels of the core ops: Const, Placeholder, Identity, NoOp, StopGradient.
#include "kernels/cpu/cpu_kernels.h"

namespace sf {
namespace {

class ConstKernel : public OpKernel {
 public:
  ConstKernel(const KernelInit& init, Status* s) {
    auto v = init.Attr<Tensor>("value");
    if (!v.ok()) *s = v.status();
    else value_ = *v;
  }
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, value_); }

 private:
  Tensor value_;
};

// Reached only when the placeholder was not fed: the executor replaces fed
// placeholders with their feeds.
class PlaceholderKernel : public OpKernel {
 public:
  PlaceholderKernel(const KernelInit& init, Status*) : name_(init.node_name) {
    auto t = init.Attr<DType>("dtype");
    auto sh = init.AttrOr<PartialShape>("shape", PartialShape());
    desc_ = std::string(t.ok() ? DTypeName(*t) : "?") + (sh.ok() ? sh->ToString() : "");
  }
  void Compute(OpKernelContext* ctx) override {
    ctx->SetStatus(InvalidArgument("placeholder '" + name_ + "' (" + desc_ +
                                   ") must be fed a value"));
  }

 private:
  std::string name_, desc_;
};

class IdentityKernel : public OpKernel {
 public:
  IdentityKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, ctx->input(0)); }
};

class NoOpKernel : public OpKernel {
 public:
  NoOpKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext*) override {}
};

}  // namespace

void RegisterCoreKernels(KernelRegistry& reg) {
  RegisterCPU<ConstKernel>(reg, "Const", {DType::kInvalid});
  RegisterCPU<PlaceholderKernel>(reg, "Placeholder", {DType::kInvalid});
  RegisterCPU<IdentityKernel>(reg, "Identity", {DType::kInvalid});
  RegisterCPU<IdentityKernel>(reg, "StopGradient", {DType::kInvalid});
  RegisterCPU<NoOpKernel>(reg, "NoOp", {DType::kInvalid});
}

}  // namespace sf

// Kernels of the training ops: each packs its handles, hyperparameters and
// gradient into one ApplyRequest and sends it to the VariableService, where
// ApplyOptimizerUpdate runs beside the variable (atomic per update).
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/variable_service.h"

namespace sf {
namespace {

class ApplyKernel : public OpKernel {
 public:
  ApplyKernel(const KernelInit& init, Status* s, std::string optimizer, int handles, int scalars)
      : optimizer_(std::move(optimizer)), handles_(handles), scalars_(scalars) {
    auto n = init.AttrOr<bool>("use_nesterov", false);
    if (!n.ok()) *s = n.status();
    else nesterov_ = *n;
  }
  void Compute(OpKernelContext* ctx) override {
    ctx->SetStatus(Internal(optimizer_ + " update is asynchronous"));
  }
  bool IsAsync() const override { return true; }
  bool IsStateful() const override { return true; }
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    if (!ctx->variables()) {
      ctx->SetStatus(FailedPrecondition("no variable service"));
      done();
      return;
    }
    ApplyRequest req;
    req.optimizer = optimizer_;
    req.use_nesterov = nesterov_;
    for (int i = 0; i < handles_; ++i) {
      const Tensor& h = ctx->input(i);
      if (h.dtype() != DType::kResource || h.num_elements() != 1) {
        ctx->SetStatus(InvalidArgument("input " + std::to_string(i) +
                                       " is not a variable handle: " + h.DebugString(0)));
        done();
        return;
      }
      req.var_ids.push_back(h.data<int64_t>()[0]);
    }
    for (int i = 0; i < scalars_; ++i) req.scalars.push_back(ctx->input(handles_ + i));
    req.grad = ctx->input(handles_ + scalars_);
    ctx->variables()->Apply(std::move(req), [ctx, done = std::move(done)](Status s) {
      ctx->SetStatus(std::move(s));
      done();
    });
  }

 private:
  std::string optimizer_;
  int handles_, scalars_;
  bool nesterov_ = false;
};

template <int kHandles, int kScalars>
struct NamedApply {
  static KernelFactory Factory(std::string optimizer) {
    return [optimizer](const KernelInit& init) -> Result<std::unique_ptr<OpKernel>> {
      Status s;
      auto k = std::make_unique<ApplyKernel>(init, &s, optimizer, kHandles, kScalars);
      if (!s.ok()) return s;
      return std::unique_ptr<OpKernel>(std::move(k));
    };
  }
};

void Reg(KernelRegistry& reg, const std::string& op, KernelFactory f) {
  if (!reg.Register(op, DeviceType::kCPU, DType::kInvalid, std::move(f)).ok()) std::abort();
}

}  // namespace

void RegisterTrainingKernels(KernelRegistry& reg) {
  Reg(reg, "ApplyGradientDescent", NamedApply<1, 1>::Factory("GradientDescent"));
  Reg(reg, "ApplyMomentum", NamedApply<2, 2>::Factory("Momentum"));
  Reg(reg, "ApplyAdagrad", NamedApply<2, 1>::Factory("Adagrad"));
  Reg(reg, "ApplyAdam", NamedApply<5, 4>::Factory("Adam"));
  Reg(reg, "ApplyRMSProp", NamedApply<3, 4>::Factory("RMSProp"));
}

}  // namespace sf

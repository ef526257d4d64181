// Kernels of the training ops, one per optimizer of kernels/optimizer_spec.h:
// each packs its handles, hyperparameters and gradient into one ApplyRequest
// and sends it to the VariableService, where ApplyOptimizerUpdate runs beside
// the variable (atomic per update).
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/optimizer_spec.h"
#include "kernels/update_origin.h"
#include "kernels/variable_service.h"

namespace sf {
namespace {

class ApplyKernel : public OpKernel {
 public:
  ApplyKernel(const KernelInit& init, Status* s, OptimizerKind optimizer)
      : op_(init.op), optimizer_(optimizer), handles_(SpecOf(optimizer).handles),
        scalars_(SpecOf(optimizer).scalars), origin_op_(OriginOpKey(init.node_name)) {
    auto n = init.AttrOr<bool>("use_nesterov", false);
    if (!n.ok()) *s = n.status();
    else nesterov_ = *n;
  }
  void Compute(OpKernelContext* ctx) override {
    ctx->SetStatus(Internal(std::string(OptimizerName(optimizer_)) + " update is asynchronous"));
  }
  bool IsAsync() const override { return true; }
  bool IsStateful() const override { return true; }
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    if (!ctx->variables()) {
      ctx->SetStatus(MissingService(op_, "a variable service"));
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
    req.origin = OriginOf(*ctx, origin_op_);
    ctx->variables()->Apply(std::move(req), [ctx, done = std::move(done)](Status s) {
      ctx->SetStatus(std::move(s));
      done();
    });
  }

 private:
  std::string op_;
  OptimizerKind optimizer_;
  int handles_, scalars_;
  uint64_t origin_op_;
  bool nesterov_ = false;
};

KernelFactory ApplyFactory(OptimizerKind optimizer) {
  return [optimizer](const KernelInit& init) -> Result<std::unique_ptr<OpKernel>> {
    Status s;
    auto k = std::make_unique<ApplyKernel>(init, &s, optimizer);
    if (!s.ok()) return s;
    return std::unique_ptr<OpKernel>(std::move(k));
  };
}

void Reg(KernelRegistry& reg, const std::string& op, KernelFactory f) {
  if (!reg.Register(op, DeviceType::kCPU, DType::kInvalid, std::move(f)).ok()) std::abort();
}

}  // namespace

void RegisterTrainingKernels(KernelRegistry& reg) {
  for (const OptimizerSpec& spec : kOptimizers) Reg(reg, spec.apply_op, ApplyFactory(spec.kind));
}

}  // namespace sf

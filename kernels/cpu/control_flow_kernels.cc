// Kernels of the control-flow ops. The executor routes values between frames
// and iterations; a dead input reaches a kernel as an invalid tensor and an
// output a kernel leaves unset is dead.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/step_stacks.h"


namespace sf {
namespace {

// The deepest loop nesting a stack index may have: far beyond any graph a
// person builds, and it bounds what an index from a loaded graph can ask.
constexpr int64_t kMaxStackIndexDepth = 64;

// A stack index: an int32 scalar (one loop) or vector (one iteration number
// per enclosing loop, outermost first).
Status IndexOf(const Tensor& t, const int32_t** index, int* n) {
  if (t.dtype() != DType::kInt32 || t.rank() > 1 || t.num_elements() < 1 ||
      t.num_elements() > kMaxStackIndexDepth)
    return InvalidArgument("the stack index must be an int32 scalar or a vector of 1 to " +
                           std::to_string(kMaxStackIndexDepth) + " int32s, got " +
                           std::string(DTypeName(t.dtype())) + " of shape " + ShapeString(t.shape()));
  *index = t.data<int32_t>();
  *n = static_cast<int>(t.num_elements());
  return Status::OK();
}

class ControlTriggerKernel : public OpKernel {
 public:
  ControlTriggerKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext*) override {}
};

class StackPushKernel : public OpKernel {
 public:
  StackPushKernel(const KernelInit& init, Status* s) {
    auto n = init.Attr<std::string>("stack_name");
    if (!n.ok()) *s = n.status();
    else name_ = *n;
  }
  void Compute(OpKernelContext* ctx) override {
    const int32_t* index = nullptr;
    int n = 0;
    Status st = IndexOf(ctx->input(1), &index, &n);
    if (!st.ok()) return ctx->SetStatus(st);
    if (!ctx->step_stacks())
      return ctx->SetStatus(FailedPrecondition("StackPush '" + name_ + "' runs outside a control-flow step"));
    ctx->step_stacks()->Push(name_, index, n, ctx->input(0));
  }
  bool IsStateful() const override { return true; }

 private:
  std::string name_;
};

class StackPopKernel : public OpKernel {
 public:
  StackPopKernel(const KernelInit& init, Status* s) {
    auto n = init.Attr<std::string>("stack_name");
    if (!n.ok()) *s = n.status();
    else name_ = *n;
  }
  void Compute(OpKernelContext* ctx) override {
    const int32_t* index = nullptr;
    int n = 0;
    Status st = IndexOf(ctx->input(0), &index, &n);
    if (!st.ok()) return ctx->SetStatus(st);
    // Nothing pushed means the forward value was dead (an untaken branch in
    // that iteration): the popped value is dead too (left unset).
    if (!ctx->step_stacks())
      return ctx->SetStatus(FailedPrecondition("StackPop '" + name_ + "' runs outside a control-flow step"));
    Tensor t;
    if (ctx->step_stacks()->Pop(name_, index, n, &t)) ctx->set_output(0, std::move(t));
  }
  bool IsStateful() const override { return true; }

 private:
  std::string name_;
};

class SwitchKernel : public OpKernel {
 public:
  SwitchKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& pred = ctx->input(1);
    if (pred.dtype() != DType::kBool || pred.num_elements() != 1) {
      ctx->SetStatus(InvalidArgument("the predicate must be a bool scalar, got " +
                                     std::string(DTypeName(pred.dtype())) + " of shape " +
                                     ShapeString(pred.shape())));
      return;
    }
    ctx->set_output(pred.flat<bool>()(0) ? 1 : 0, ctx->input(0));
  }
};

class MergeKernel : public OpKernel {
 public:
  MergeKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      if (!ctx->input(i).valid()) continue;
      ctx->set_output(0, ctx->input(i));
      ctx->set_output(1, Tensor::Scalar<int32_t>(i));
      return;
    }
    ctx->SetStatus(InvalidArgument("Merge has no live input"));
  }
};

// Enter, Exit, NextIteration and LoopCond forward their input; the executor
// decides the frame and iteration it lands in.
class ForwardKernel : public OpKernel {
 public:
  ForwardKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, ctx->input(0)); }
};

}  // namespace

void RegisterControlFlowKernels(KernelRegistry& reg) {
  RegisterCPU<SwitchKernel>(reg, "Switch", {DType::kInvalid});
  RegisterCPU<MergeKernel>(reg, "Merge", {DType::kInvalid});
  RegisterCPU<ForwardKernel>(reg, "Enter", {DType::kInvalid});
  RegisterCPU<ForwardKernel>(reg, "Exit", {DType::kInvalid});
  RegisterCPU<ForwardKernel>(reg, "NextIteration", {DType::kInvalid});
  RegisterCPU<ForwardKernel>(reg, "LoopCond", {DType::kInvalid});
  RegisterCPU<ControlTriggerKernel>(reg, "ControlTrigger", {DType::kInvalid});
  RegisterCPU<StackPushKernel>(reg, "StackPush", {DType::kInvalid});
  RegisterCPU<StackPopKernel>(reg, "StackPop", {DType::kInvalid});
}

}  // namespace sf

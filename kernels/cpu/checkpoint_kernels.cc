// Kernels of the in-graph checkpoint ops (graph/ops/checkpoint_ops.cc): they
// write and read the checkpoint store through the runtime's CheckpointService,
// on the device they are placed on (a checkpoint directory on that node).
#include "kernels/checkpoint_service.h"
#include "kernels/cpu/cpu_kernels.h"

namespace sf {
namespace {

// The names attr: one variable name per line.
Result<std::vector<std::string>> Names(const KernelInit& init) {
  SF_ASSIGN_OR_RETURN(std::string joined, init.Attr<std::string>("names"));
  return SplitCheckpointNames(joined);
}

class SaveCheckpointKernel : public OpKernel {
 public:
  SaveCheckpointKernel(const KernelInit& init, Status* s) {
    auto dir = init.Attr<std::string>("dir");
    auto names = Names(init);
    if (!dir.ok()) { *s = dir.status(); return; }
    if (!names.ok()) { *s = names.status(); return; }
    dir_ = *dir;
    names_ = *names;
    checkpoints_ = init.checkpoints;
  }
  void Compute(OpKernelContext* ctx) override {
    if (!checkpoints_) return ctx->SetStatus(FailedPrecondition("SaveCheckpoint needs a session (no checkpoint store)"));
    const Tensor& step = ctx->input(0);
    if (step.dtype() != DType::kInt64 || step.num_elements() != 1)
      return ctx->SetStatus(InvalidArgument("SaveCheckpoint: global_step must be an int64 scalar, got " +
                                            step.DebugString(0)));
    if (ctx->num_inputs() - 1 != static_cast<int>(names_.size()))
      return ctx->SetStatus(InvalidArgument("SaveCheckpoint: " + std::to_string(names_.size()) + " names but " +
                                            std::to_string(ctx->num_inputs() - 1) + " values"));
    std::vector<Tensor> values;
    for (int i = 1; i < ctx->num_inputs(); ++i) values.push_back(ctx->input(i));
    auto id = checkpoints_->Save(dir_, step.data<int64_t>()[0], names_, values);
    if (!id.ok()) return ctx->SetStatus(id.status().WithPrefix("SaveCheckpoint to '" + dir_ + "'"));
    ctx->set_output(0, Tensor::Scalar(*id));
  }
  bool IsStateful() const override { return true; }

 private:
  std::string dir_;
  std::vector<std::string> names_;
  CheckpointService* checkpoints_ = nullptr;  // the runtime's; null outside a session
};

class RestoreCheckpointKernel : public OpKernel {
 public:
  RestoreCheckpointKernel(const KernelInit& init, Status* s) {
    auto dir = init.Attr<std::string>("dir");
    auto names = Names(init);
    auto dtypes = init.Attr<std::vector<DType>>("dtypes");
    if (!dir.ok()) { *s = dir.status(); return; }
    if (!names.ok()) { *s = names.status(); return; }
    if (!dtypes.ok()) { *s = dtypes.status(); return; }
    dir_ = *dir;
    names_ = *names;
    dtypes_ = *dtypes;
    checkpoints_ = init.checkpoints;
  }
  void Compute(OpKernelContext* ctx) override {
    if (!checkpoints_)
      return ctx->SetStatus(FailedPrecondition("RestoreCheckpoint needs a session (no checkpoint store)"));
    int64_t step = 0;
    auto values = checkpoints_->Restore(dir_, names_, &step);
    if (!values.ok()) return ctx->SetStatus(values.status().WithPrefix("RestoreCheckpoint from '" + dir_ + "'"));
    for (size_t i = 0; i < values->size(); ++i) {
      if ((*values)[i].dtype() != dtypes_[i])
        return ctx->SetStatus(InvalidArgument("RestoreCheckpoint: variable '" + names_[i] + "' is " +
                                              DTypeName((*values)[i].dtype()) + " in the checkpoint but " +
                                              DTypeName(dtypes_[i]) + " in the graph"));
      ctx->set_output(static_cast<int>(i), std::move((*values)[i]));
    }
    ctx->set_output(static_cast<int>(values->size()), Tensor::Scalar(step));
  }
  bool IsStateful() const override { return true; }

 private:
  std::string dir_;
  std::vector<std::string> names_;
  std::vector<DType> dtypes_;
  CheckpointService* checkpoints_ = nullptr;  // the runtime's; null outside a session
};

}  // namespace

void RegisterCheckpointKernels(KernelRegistry& reg) {
  RegisterCPU<SaveCheckpointKernel>(reg, "SaveCheckpoint", {DType::kInvalid});
  RegisterCPU<RestoreCheckpointKernel>(reg, "RestoreCheckpoint", {DType::kInvalid});
}

}  // namespace sf

// Kernels of the state ops: VarHandle resolves its variable once, when the
// kernel is built; ReadVariable and Assign* are async and go through the
// VariableService, so they never block a compute thread.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/variable_service.h"

namespace sf {
namespace {

class VarHandleKernel : public ResourceHandleKernel {
 public:
  VarHandleKernel(const KernelInit& init, Status* s) {
    auto name = init.Attr<std::string>("shared_name");
    auto dtype = init.Attr<DType>("dtype");
    auto shape = init.AttrOr<PartialShape>("shape", PartialShape());
    if (!name.ok()) { *s = name.status(); return; }
    if (!dtype.ok()) { *s = dtype.status(); return; }
    if (!shape.ok()) { *s = shape.status(); return; }
    if (!init.variables) {
      *s = MissingService(init.op, ("a variable service for variable '" + *name + "'").c_str());
      return;
    }
    SetHandle(init.variables->Resolve(*name, *dtype, *shape), s);
  }
};

// The variable id carried by a resource input, or an error.
Result<int64_t> HandleId(const Tensor& t) { return ResourceId(t, "a variable handle"); }

// A kernel that reaches one variable, named by its input 0, through the
// VariableService: always asynchronous, always stateful.
class VariableAccessKernel : public AsyncResourceKernel {
 public:
  explicit VariableAccessKernel(const KernelInit& init) : op_(init.op), origin_op_(OriginOpKey(init.node_name)) {}
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    auto id = HandleId(ctx->input(0));
    if (!id.ok() || !ctx->variables()) {
      ctx->SetStatus(id.ok() ? MissingService(op_, "a variable service") : id.status());
      done();
      return;
    }
    Access(ctx, *id, std::move(done));
  }

 protected:
  // Starts the access of variable `id`; calls done once it has finished.
  virtual void Access(OpKernelContext* ctx, int64_t id, std::function<void()> done) = 0;
  // The origin of this kernel's update in ctx's step (kernels/update_origin.h).
  UpdateOrigin Origin(const OpKernelContext& ctx) const { return OriginOf(ctx, origin_op_); }

 private:
  std::string op_;
  uint64_t origin_op_;
};

class ReadVariableKernel : public VariableAccessKernel {
 public:
  ReadVariableKernel(const KernelInit& init, Status* s) : VariableAccessKernel(init) {
    auto d = init.Attr<DType>("dtype");
    if (!d.ok()) *s = d.status();
    else dtype_ = *d;
  }

 protected:
  void Access(OpKernelContext* ctx, int64_t vid, std::function<void()> done) override {
    VariableService* vars = ctx->variables();
    const DType want = dtype_;
    vars->Read(vid, [ctx, done = std::move(done), want, vars, vid](Result<Tensor> r) {
      if (!r.ok()) {
        ctx->SetStatus(r.status());
      } else if (r->dtype() != want) {
        ctx->SetStatus(InvalidArgument("variable '" + vars->NameOf(vid) + "' holds " +
                                       DTypeName(r->dtype()) + ", read as " + DTypeName(want)));
      } else {
        ctx->set_output(0, std::move(r).value());
      }
      done();
    });
  }

 private:
  DType dtype_ = DType::kInvalid;
};

template <AssignMode kMode>
class AssignKernel : public VariableAccessKernel {
 public:
  AssignKernel(const KernelInit& init, Status*) : VariableAccessKernel(init) {}

 protected:
  void Access(OpKernelContext* ctx, int64_t id, std::function<void()> done) override {
    ctx->variables()->Assign(
        id, kMode, ctx->input(1).Owned(),
        [ctx, done = std::move(done)](Result<Tensor> r) {
          if (!r.ok()) ctx->SetStatus(r.status());
          else ctx->set_output(0, std::move(r).value());
          done();
        },
        Origin(*ctx));
  }
};

// One AssignRows request to the variable's shard: the rows change all at
// once there, so no read sees part of them.
class ResourceScatterUpdateKernel : public VariableAccessKernel {
 public:
  ResourceScatterUpdateKernel(const KernelInit& init, Status*) : VariableAccessKernel(init) {}

 protected:
  void Access(OpKernelContext* ctx, int64_t id, std::function<void()> done) override {
    AssignRowsRequest req;
    req.var_id = id;
    req.indices = ctx->input(1).Owned();
    req.rows = ctx->input(2).Owned();
    req.origin = Origin(*ctx);
    ctx->variables()->AssignRows(std::move(req), [ctx, done = std::move(done)](Status s) {
      if (!s.ok()) ctx->SetStatus(s);
      done();
    });
  }
};

}  // namespace

void RegisterStateKernels(KernelRegistry& reg) {
  RegisterCPU<VarHandleKernel>(reg, "VarHandle", {DType::kInvalid});
  RegisterCPU<ReadVariableKernel>(reg, "ReadVariable", {DType::kInvalid});
  RegisterCPU<AssignKernel<AssignMode::kAssign>>(reg, "Assign", {DType::kInvalid});
  RegisterCPU<AssignKernel<AssignMode::kAdd>>(reg, "AssignAdd", {DType::kInvalid});
  RegisterCPU<AssignKernel<AssignMode::kSub>>(reg, "AssignSub", {DType::kInvalid});
  RegisterCPU<ResourceScatterUpdateKernel>(reg, "ResourceScatterUpdate", {DType::kInvalid});
}

}  // namespace sf

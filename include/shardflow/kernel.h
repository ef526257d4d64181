// OpKernel: the code that computes one op on one device for one dtype, and the
// registry that finds it. Public so that a program can add kernels for its
// own ops (see shardflow/op_registry.h for the op side).
//
// A kernel object is built once per node when a partition is planned (so it
// parses its attributes once) and then computes once per step, possibly for
// several steps at once: Compute must not keep per-step state in members
// without a lock. Kernels never throw: they report through ctx->SetStatus().
// Async kernels (variable access, queues) call done() exactly once, from any
// thread, after setting outputs or a status.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "shardflow/attr.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace Eigen {
struct ThreadPoolDevice;
}

namespace sf {

class ComputePool;
class VariableService;
class EmbeddingShardService;
class ReplicationService;
class CollectiveService;
class QueueService;
class RendezvousService;
class CheckpointService;
class StepStacks;
class RunCounters;

enum class DeviceType : uint8_t { kCPU = 0, kGPU = 1 };
const char* DeviceTypeName(DeviceType d);

// The services a kernel reaches, when it is built (KernelInit) and when it
// runs (OpKernelContext). Each may be null outside a session, or where the
// runtime has none: a kernel then reports FailedPrecondition naming its op.
struct KernelServices {
  VariableService* variables = nullptr;
  EmbeddingShardService* embeddings = nullptr;  // embedding shards
  ReplicationService* replication = nullptr;    // sync replicas, versions, SSP
  CollectiveService* collectives = nullptr;     // all-reduce groups
  QueueService* queues = nullptr;
  RendezvousService* rendezvous = nullptr;      // null unless the step spans partitions
  CheckpointService* checkpoints = nullptr;     // the in-graph checkpoint ops' store
  RunCounters* run_counters = nullptr;          // stateful nodes' runs, shared by a session's executors
  // Updates carry their step's origin (kernels/update_origin.h): true on a
  // cluster node, whose sessions may run a failed step again.
  bool update_origins = false;
};

// What a kernel knows when it is built.
struct KernelInit : KernelServices {
  std::string op;
  std::string node_name;
  const AttrMap* attrs = nullptr;
  std::vector<DType> input_dtypes;
  std::vector<DType> output_dtypes;
  DeviceType device = DeviceType::kCPU;

  template <typename T>
  Result<T> Attr(const std::string& name) const { return attrs->Get<T>(name); }
  template <typename T>
  Result<T> AttrOr(const std::string& name, T def) const { return attrs->GetOr<T>(name, def); }
};

class OpKernelContext {
 public:
  // services (may be null: none) must outlive the context.
  OpKernelContext(const Tensor* const* inputs, int num_inputs, Tensor* outputs, int num_outputs,
                  ComputePool* pool, const KernelServices* services, int64_t step_id)
      : inputs_(inputs), num_inputs_(num_inputs), outputs_(outputs), num_outputs_(num_outputs),
        pool_(pool), services_(services ? services : &kNoServices), step_id_(step_id) {}

  int num_inputs() const { return num_inputs_; }
  int num_outputs() const { return num_outputs_; }
  const Tensor& input(int i) const { return *inputs_[i]; }
  void set_output(int i, Tensor t) { outputs_[i] = std::move(t); }
  // Allocates output i (uninitialised) and returns it.
  Tensor& allocate_output(int i, DType dtype, Shape shape) {
    outputs_[i] = Tensor(dtype, std::move(shape));
    return outputs_[i];
  }
  Tensor& output(int i) { return outputs_[i]; }

  void SetStatus(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  const Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

  ComputePool* pool() const { return pool_; }
  // The Eigen device for intra-op parallelism (never null inside a session).
  const Eigen::ThreadPoolDevice& eigen_device() const;
  // The services a kernel reaches (KernelServices says when each is null).
  VariableService* variables() const { return services_->variables; }
  EmbeddingShardService* embeddings() const { return services_->embeddings; }
  ReplicationService* replication() const { return services_->replication; }
  CollectiveService* collectives() const { return services_->collectives; }
  QueueService* queues() const { return services_->queues; }
  int64_t step_id() const { return step_id_; }
  // Whether updates carry the step's origin (KernelServices::update_origins).
  bool update_origins() const { return services_->update_origins; }
  // The loop frame instance and iteration this op runs in (the root frame ""
  // and 0 outside loops); _Send/_Recv key transfers by them. `frame_key`
  // must outlive the context.
  void set_frame(const std::string* frame_key, int64_t iteration) {
    frame_key_ = frame_key;
    iteration_ = iteration;
  }
  const std::string& frame_key() const;
  int64_t iteration() const { return iteration_; }
  // The step's loop-gradient stacks (StackPush/StackPop): they belong to the
  // step being run and go with it; null outside a control-flow step.
  void set_step_stacks(StepStacks* stacks) { stacks_ = stacks; }
  StepStacks* step_stacks() const { return stacks_; }

 private:
  const Tensor* const* inputs_;
  int num_inputs_;
  Tensor* outputs_;
  int num_outputs_;
  static constexpr KernelServices kNoServices{};
  ComputePool* pool_;
  const KernelServices* services_;  // never null
  int64_t step_id_;
  const std::string* frame_key_ = nullptr;
  int64_t iteration_ = 0;
  StepStacks* stacks_ = nullptr;
  Status status_;
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  // Synchronous kernels compute here.
  virtual void Compute(OpKernelContext* ctx) = 0;
  // Async kernels override both: IsAsync() true, ComputeAsync calls done once.
  virtual bool IsAsync() const { return false; }
  virtual void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) {
    Compute(ctx);
    done();
  }
  // True for kernels whose output depends on more than their inputs (random,
  // variables): the runtime never caches or folds them.
  virtual bool IsStateful() const { return false; }
};

// Builds a kernel for a node; returns an error naming the attr that is wrong.
using KernelFactory = std::function<Result<std::unique_ptr<OpKernel>>(const KernelInit&)>;

// Kernels keyed by (op, device, dtype). DType::kInvalid registers a kernel for
// every dtype of that op (type-agnostic ops such as Identity, Reshape).
class KernelRegistry {
 public:
  // Registers a kernel; returns AlreadyExists-style InvalidArgument on a duplicate key.
  Status Register(const std::string& op, DeviceType device, DType dtype, KernelFactory f);
  // Finds the kernel for a node; NotFound naming op, device and dtype otherwise.
  Result<const KernelFactory*> Find(const std::string& op, DeviceType device, DType dtype) const;
  bool Has(const std::string& op, DeviceType device, DType dtype) const;
  // Every (op, device, dtype) registered, for the test that runs them all.
  std::vector<std::tuple<std::string, DeviceType, DType>> Keys() const;

 private:
  std::map<std::tuple<std::string, DeviceType, DType>, KernelFactory> kernels_;
};

// Registers a kernel class K constructible as K(const KernelInit&, Status*)
// for an op on the CPU for each dtype given.
template <typename K>
KernelFactory MakeFactory() {
  return [](const KernelInit& init) -> Result<std::unique_ptr<OpKernel>> {
    Status s;
    auto k = std::make_unique<K>(init, &s);
    if (!s.ok()) return s;
    return std::unique_ptr<OpKernel>(std::move(k));
  };
}

// The kernels of every standard op on the CPU (and GPU when built with CUDA).
// A program with its own ops starts its registry with these, adds its
// kernels, and hands it to SessionOptions::kernels or NodeOptions::kernels.
void RegisterStandardKernels(KernelRegistry& reg);
// The registry of every standard kernel, built on first use; what a session
// or node uses when it is given none.
const KernelRegistry& StandardKernelRegistry();

}  // namespace sf

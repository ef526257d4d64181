// A kernel whose service the runtime does not provide (a null pointer in
// KernelInit / OpKernelContext) reports FailedPrecondition naming its op and
// the service; it never crashes. Each narrow service is missing on its own:
// the others are present (an in-memory VariableService and EmbeddingShardService).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kernels/in_memory_variables.h"
#include "shardflow/kernel.h"

using namespace sf;

namespace {

struct Services {
  InMemoryVariables vars;
  bool variables = true, embeddings = true;  // replication and collectives: never here
};

// Builds op's CPU kernel (any dtype) with attrs and runs it on inputs; the
// kernel's status.
Status RunWithout(Services& sv, const std::string& op, const AttrMap& attrs,
                  const std::vector<Tensor>& inputs, int num_outputs) {
  auto f = StandardKernelRegistry().Find(op, DeviceType::kCPU, DType::kInvalid);
  if (!f.ok()) return f.status();
  VariableService* vars = sv.variables ? &sv.vars : nullptr;
  EmbeddingShardService* emb = sv.embeddings ? &sv.vars : nullptr;
  KernelInit init;
  init.op = op;
  init.node_name = op;
  init.attrs = &attrs;
  for (const Tensor& t : inputs) init.input_dtypes.push_back(t.dtype());
  init.output_dtypes.assign(num_outputs, DType::kFloat32);
  init.variables = vars;
  init.embeddings = emb;
  auto k = (**f)(init);
  if (!k.ok()) return k.status();
  std::vector<const Tensor*> ins;
  for (const Tensor& t : inputs) ins.push_back(&t);
  std::vector<Tensor> outs(num_outputs);
  OpKernelContext ctx(ins.data(), static_cast<int>(ins.size()), outs.data(), num_outputs, nullptr,
                      &init, /*step_id=*/1);
  bool called = false;
  (*k)->ComputeAsync(&ctx, [&] { called = true; });
  REQUIRE(called);  // answered inline: nothing was sent anywhere
  return ctx.status();
}

Tensor Handle(int64_t id) {
  Tensor h(DType::kResource, {});
  h.data<int64_t>()[0] = id;
  return h;
}

void CheckMissing(const Status& s, const std::string& op, const std::string& service) {
  INFO(s.ToString());
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message().find("op " + op + " ") != std::string::npos);
  CHECK(s.message().find(service) != std::string::npos);
}

}  // namespace

TEST_CASE("Kernels without their service: FailedPrecondition naming the op", "[kernels]") {
  Services sv;
  auto id = sv.vars.Resolve("w", DType::kFloat32, PartialShape({2}));
  REQUIRE(id.ok());
  const Tensor h = Handle(*id);
  const Tensor lr = Tensor::Scalar<float>(0.1f);
  const Tensor grad = Tensor::FromVector(std::vector<float>{1, 1});
  const Tensor tag = Tensor::Scalar<int64_t>(0);

  SECTION("replication") {
    AttrMap none;
    CheckMissing(RunWithout(sv, "SyncReplicaStats", none, {h}, 1), "SyncReplicaStats", "replication service");
    CheckMissing(RunWithout(sv, "StalenessStats", none, {h}, 1), "StalenessStats", "replication service");
    CheckMissing(RunWithout(sv, "AbortSyncStep", none, {h}, 0), "AbortSyncStep", "replication service");
    AttrMap read;
    read.Set("dtype", DType::kFloat32);
    CheckMissing(RunWithout(sv, "ReadVariableWithVersion", read, {h}, 2), "ReadVariableWithVersion",
                 "replication service");
    AttrMap ssp;
    ssp.Set("worker", int64_t{0});
    ssp.Set("num_workers", int64_t{2});
    ssp.Set("staleness", int64_t{1});
    CheckMissing(RunWithout(sv, "StaleSyncWait", ssp, {h, tag}, 0), "StaleSyncWait", "replication service");
    AttrMap sync;
    sync.Set("optimizer", std::string("GradientDescent"));
    sync.Set("num_required", int64_t{2});
    CheckMissing(RunWithout(sv, "ApplyGradientSync", sync, {h, lr, grad, tag}, 1), "ApplyGradientSync",
                 "replication service");
    // The asynchronous tagged apply needs only the variable service: it runs.
    AttrMap async;
    async.Set("optimizer", std::string("GradientDescent"));
    Status s = RunWithout(sv, "ApplyGradientAsync", async, {h, lr, grad, tag}, 0);
    CHECK(s.code() == Code::kFailedPrecondition);  // w was never initialised
    CHECK(s.message().find("'w'") != std::string::npos);
  }
  SECTION("collectives") {
    AttrMap a;
    a.Set("group_key", std::string("g"));
    a.Set("group_size", int64_t{2});
    a.Set("rank", int64_t{0});
    CheckMissing(RunWithout(sv, "AllReduce", a, {grad}, 1), "AllReduce", "collective service");
  }
  SECTION("embeddings") {
    sv.embeddings = false;
    AttrMap a;
    a.Set("table", std::string("t"));
    a.Set("table_rows", int64_t{4});
    a.Set("num_shards", int64_t{1});
    a.Set("shard", int64_t{0});
    const Tensor ids = Tensor::FromVector(std::vector<int64_t>{0, 1});
    CheckMissing(RunWithout(sv, "EmbeddingShardLookup", a, {h, ids}, 1), "EmbeddingShardLookup",
                 "embedding shard service");
    CheckMissing(RunWithout(sv, "EmbeddingSparseApplyGradientDescent", a, {h, lr, ids, grad}, 0),
                 "EmbeddingSparseApplyGradientDescent", "embedding shard service");
  }
  SECTION("variables") {
    sv.variables = false;
    AttrMap read;
    read.Set("dtype", DType::kFloat32);
    CheckMissing(RunWithout(sv, "ReadVariable", read, {h}, 1), "ReadVariable", "variable service");
    CheckMissing(RunWithout(sv, "AssignAdd", AttrMap{}, {h, grad}, 1), "AssignAdd", "variable service");
    CheckMissing(RunWithout(sv, "ApplyGradientDescent", AttrMap{}, {h, lr, grad}, 0), "ApplyGradientDescent",
                 "variable service");
    AttrMap async;
    async.Set("optimizer", std::string("GradientDescent"));
    CheckMissing(RunWithout(sv, "ApplyGradientAsync", async, {h, lr, grad, tag}, 0), "ApplyGradientAsync",
                 "variable service");
    // VarHandle resolves when it is built: the build fails, naming the op.
    AttrMap vh;
    vh.Set("shared_name", std::string("v"));
    vh.Set("dtype", DType::kFloat32);
    CheckMissing(RunWithout(sv, "VarHandle", vh, {}, 1), "VarHandle", "variable service");
  }
}

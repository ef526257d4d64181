// Kernels of the work sharing ops (graph/ops/chunk_queue_ops.cc): the
// ChunkQueue op resolves its queue when built; Take, Report and Release are
// asynchronous calls of the ChunkQueueService (a Take waiting for a chunk
// holds no thread); CriteoChunkReader reads one chunk on the compute pool.
#include "kernels/chunk_queue_service.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/criteo_chunk.h"
#include "kernels/criteo_reader.h"
#include "kernels/queue_service.h"

namespace sf {
namespace {

ChunkQueueService* ChunksOf(QueueService* q) { return q ? q->chunk_queues() : nullptr; }

class ChunkQueueKernel : public ResourceHandleKernel {
 public:
  ChunkQueueKernel(const KernelInit& init, Status* s) {
    auto name = init.Attr<std::string>("shared_name");
    if (!name.ok()) { *s = name.status(); return; }
    ChunkLeaseOptions o;
    auto n = init.Attr<int64_t>("num_chunks");
    auto e = init.AttrOr<int64_t>("num_epochs", o.num_epochs);
    auto l = init.AttrOr<int64_t>("lease_ms", o.lease_ms);
    if (!n.ok() || !e.ok() || !l.ok()) { *s = !n.ok() ? n.status() : !e.ok() ? e.status() : l.status(); return; }
    o.num_chunks = *n;
    o.num_epochs = *e;
    o.lease_ms = *l;
    ChunkQueueService* chunks = ChunksOf(init.queues);
    if (!chunks) {
      *s = FailedPrecondition("chunk queue '" + *name + "' needs a session or node with chunk queues");
      return;
    }
    SetHandle(chunks->Resolve(*name, o), s);
  }
};

// A kernel reaching the chunk queue of input 0 for the worker of input 1.
class ChunkAccessKernel : public AsyncResourceKernel {
 public:
  explicit ChunkAccessKernel(const KernelInit&, Status*) {}
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    auto id = ResourceId(ctx->input(0), "a chunk queue handle");
    const Tensor& w = ctx->input(1);
    if (!id.ok()) {
      ctx->SetStatus(id.status());
      return done();
    }
    if (w.dtype() != DType::kInt64 || w.num_elements() != 1) {
      ctx->SetStatus(InvalidArgument("worker must be an int64 scalar, got " + w.DebugString(0)));
      return done();
    }
    ChunkQueueService* chunks = ChunksOf(ctx->queues());
    if (!chunks) {
      ctx->SetStatus(FailedPrecondition("chunk queue ops need a session or node with chunk queues"));
      return done();
    }
    Access(ctx, chunks, *id, w.data<int64_t>()[0], std::move(done));
  }

 protected:
  virtual void Access(OpKernelContext* ctx, ChunkQueueService* q, int64_t id, int64_t worker,
                      std::function<void()> done) = 0;
};

class TakeKernel : public ChunkAccessKernel {
 public:
  using ChunkAccessKernel::ChunkAccessKernel;

 protected:
  void Access(OpKernelContext* ctx, ChunkQueueService* q, int64_t id, int64_t worker,
              std::function<void()> done) override {
    int64_t reader = 0;  // input 2, when there: what the worker reads its chunks into
    if (ctx->num_inputs() > 2) {
      const Tensor& r = ctx->input(2);
      if (r.dtype() != DType::kInt64 || r.num_elements() != 1) {
        ctx->SetStatus(InvalidArgument("reader must be an int64 scalar, got " + r.DebugString(0)));
        return done();
      }
      reader = r.data<int64_t>()[0];
    }
    q->Take(id, worker, reader, ctx->step_id(), [ctx, done = std::move(done)](Result<ChunkTicket> t) {
      if (!t.ok()) {
        ctx->SetStatus(t.status());
      } else {
        ctx->set_output(0, Tensor::Scalar<int64_t>(t->ticket));
        ctx->set_output(1, Tensor::Scalar<int64_t>(t->chunk));
        ctx->set_output(2, Tensor::Scalar<int64_t>(t->skip));
      }
      done();
    });
  }
};

class ReportKernel : public ChunkAccessKernel {
 public:
  ReportKernel(const KernelInit& init, Status* s) : ChunkAccessKernel(init, s) {
    auto r = init.AttrOr<bool>("read", false);
    if (!r.ok()) *s = r.status();
    else read_ = *r;
  }

 protected:
  void Access(OpKernelContext* ctx, ChunkQueueService* q, int64_t id, int64_t worker,
              std::function<void()> done) override {
    const Tensor& t = ctx->input(2);
    const Tensor& p = ctx->input(3);
    if (t.dtype() != DType::kInt64 || p.dtype() != DType::kInt64 || t.num_elements() != p.num_elements()) {
      ctx->SetStatus(InvalidArgument("tickets and pos must be int64 of one size, got " + t.DebugString(0) + " and " +
                                     p.DebugString(0)));
      return done();
    }
    // A batch's rows come chunk by chunk, in order: report each ticket's
    // last (largest) line once.
    std::vector<int64_t> tickets, pos;
    const int64_t* tv = t.data<int64_t>();
    const int64_t* pv = p.data<int64_t>();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      auto it = std::find(tickets.begin(), tickets.end(), tv[i]);
      if (it == tickets.end()) {
        tickets.push_back(tv[i]);
        pos.push_back(pv[i]);
      } else {
        int64_t& have = pos[it - tickets.begin()];
        have = std::max(have, pv[i]);
      }
    }
    q->Report(id, worker, std::move(tickets), std::move(pos), read_, [ctx, done = std::move(done)](Status s) {
      ctx->SetStatus(std::move(s));
      done();
    });
  }

 private:
  bool read_ = false;
};

class ReleaseKernel : public ChunkAccessKernel {
 public:
  using ChunkAccessKernel::ChunkAccessKernel;

 protected:
  void Access(OpKernelContext* ctx, ChunkQueueService* q, int64_t id, int64_t worker,
              std::function<void()> done) override {
    q->Release(id, worker, [ctx, done = std::move(done)](Result<int64_t> n) {
      if (!n.ok()) ctx->SetStatus(n.status());
      else ctx->set_output(0, Tensor::Scalar<int64_t>(*n));
      done();
    });
  }
};

class CriteoChunkReaderKernel : public OpKernel {
 public:
  CriteoChunkReaderKernel(const KernelInit& init, Status* s) {
    auto files = init.Attr<std::string>("files");
    if (!files.ok()) { *s = files.status(); return; }
    auto split = SplitCriteoFiles(*files);
    if (!split.ok()) { *s = split.status(); return; }
    auto plan = init.Attr<std::vector<int64_t>>("chunks");
    if (!plan.ok()) { *s = plan.status(); return; }
    auto chunks = DecodeChunkPlan(*split, *plan);
    if (!chunks.ok()) { *s = chunks.status(); return; }
    auto options = CriteoReaderOptionsFromAttrs(*init.attrs);
    if (!options.ok()) { *s = options.status(); return; }
    chunks_ = std::move(chunks).value();
    options_ = *options;
  }
  bool IsStateful() const override { return true; }
  void Compute(OpKernelContext* ctx) override {
    const int64_t ticket = ctx->input(0).scalar_as<int64_t>();
    const int64_t chunk = ctx->input(1).scalar_as<int64_t>();
    if (chunk < 0 || chunk >= static_cast<int64_t>(chunks_.size()))
      return ctx->SetStatus(InvalidArgument("chunk " + std::to_string(chunk) + " is not one of the " +
                                            std::to_string(chunks_.size()) + " chunks of this reader's plan (do the "
                                            "chunk queue and the reader plan the same files?)"));
    auto rows = ReadCriteoChunk(chunks_[chunk], ctx->input(2).scalar_as<int64_t>(), options_);
    if (!rows.ok()) return ctx->SetStatus(rows.status().WithPrefix("chunk " + std::to_string(chunk)));
    const int64_t n = rows->label.num_elements();
    Tensor tickets(DType::kInt64, {n});
    std::fill_n(tickets.data<int64_t>(), n, ticket);
    ctx->set_output(0, std::move(rows->label));
    ctx->set_output(1, std::move(rows->dense));
    ctx->set_output(2, std::move(rows->categorical));
    ctx->set_output(3, std::move(tickets));
    ctx->set_output(4, std::move(rows->pos));
    ctx->set_output(5, Tensor::Scalar<int64_t>(rows->last_pos));
    ctx->set_output(6, Tensor::Scalar<int64_t>(rows->malformed));
  }

 private:
  std::vector<LineChunk> chunks_;
  CriteoReaderOptions options_;
};

}  // namespace

void RegisterChunkQueueKernels(KernelRegistry& reg) {
  RegisterCPU<ChunkQueueKernel>(reg, "ChunkQueue", {DType::kInvalid});
  RegisterCPU<TakeKernel>(reg, "ChunkQueueTake", {DType::kInvalid});
  RegisterCPU<ReportKernel>(reg, "ChunkQueueReport", {DType::kInvalid});
  RegisterCPU<ReleaseKernel>(reg, "ChunkQueueRelease", {DType::kInvalid});
  RegisterCPU<CriteoChunkReaderKernel>(reg, "CriteoChunkReader", {DType::kInvalid});
}

}  // namespace sf

// The kernel of CriteoReader (graph/ops/reader_ops.cc): a CriteoReader
// (kernels/criteo_reader.h), made at the node's first run, whose threads read
// ahead; a run takes one batch, waiting without a thread. Every kernel of the
// node in a session (one per run signature) shares the reader through the
// session's RunCounters, so fetching a batch from two signatures reads on
// from one position; outside a session the kernel keeps its own.
#include <mutex>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/criteo_reader.h"
#include "kernels/run_counters.h"

namespace sf {
namespace {

// The node's reader, made on first use; a failure to make it (a file that
// cannot be opened) is not kept, so a later run tries again.
struct SharedReader {
  std::mutex mu;
  std::unique_ptr<CriteoReader> reader;  // GUARDED_BY(mu) until made; then lives with the session
};

class CriteoReaderKernel : public OpKernel {
 public:
  CriteoReaderKernel(const KernelInit& init, Status* s) {
    auto files = init.Attr<std::string>("files");
    if (!files.ok()) { *s = files.status(); return; }
    auto split = SplitCriteoFiles(*files);
    if (!split.ok()) { *s = split.status(); return; }
    auto options = CriteoReaderOptionsFromAttrs(*init.attrs);
    if (!options.ok()) { *s = options.status(); return; }
    files_ = *split;
    options_ = *options;
    auto make = [] { return std::make_shared<SharedReader>(); };
    shared_ = init.run_counters ? init.run_counters->NodeState<SharedReader>(init.node_name, make) : make();
  }
  void Compute(OpKernelContext* ctx) override { ctx->SetStatus(Internal("CriteoReader is asynchronous")); }
  bool IsAsync() const override { return true; }
  bool IsStateful() const override { return true; }
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    auto reader = Reader();
    if (!reader.ok()) {
      ctx->SetStatus(reader.status());
      return done();
    }
    CriteoReader* r = *reader;
    r->Next([ctx, r, done = std::move(done)](Result<CriteoBatch> b) {
      if (!b.ok()) {
        ctx->SetStatus(b.status());
      } else {
        ctx->set_output(0, std::move(b->label));
        ctx->set_output(1, std::move(b->dense));
        ctx->set_output(2, std::move(b->categorical));
        ctx->set_output(3, Tensor::Scalar<int64_t>(r->stats().malformed));
      }
      done();
    });
  }

 private:
  Result<CriteoReader*> Reader() {
    std::lock_guard<std::mutex> l(shared_->mu);
    if (!shared_->reader) {
      auto r = CriteoReader::Create(files_, options_);
      if (!r.ok()) return r.status();
      shared_->reader = std::move(r).value();
    }
    return shared_->reader.get();
  }

  std::vector<std::string> files_;
  CriteoReaderOptions options_;
  std::shared_ptr<SharedReader> shared_;
};

}  // namespace

void RegisterReaderKernels(KernelRegistry& reg) { RegisterCPU<CriteoReaderKernel>(reg, "CriteoReader", {DType::kInvalid}); }

}  // namespace sf

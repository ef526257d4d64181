// VariableService's default embedding calls: a service that cannot combine
// where the rows live reads the shard and combines here.
#include "kernels/variable_service.h"

namespace sf {

void VariableService::GatherCombine(int64_t id, EmbeddingShardSpec spec, EmbeddingGather q,
                                    std::function<void(Result<Tensor>)> done) {
  Read(id, [spec = std::move(spec), q = std::move(q), done = std::move(done)](Result<Tensor> r) {
    if (!r.ok()) return done(r.status());
    Tensor out;
    Status s = EmbeddingGatherCombine(spec, q, *r, &out);
    if (!s.ok()) return done(s);
    done(std::move(out));
  });
}

void VariableService::SparseApply(SparseApplyRequest req, std::function<void(Status)> done) {
  done(Unimplemented(std::string("this variable service has no sparse ") +
                    OptimizerName(req.optimizer) + " update"));
}

}  // namespace sf

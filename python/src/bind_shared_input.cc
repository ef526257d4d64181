// The shared input (shardflow/chunk_queue_ops.h) for sf.data: the chunk
// plan of Criteo files, the chunk queue, one worker's reader and row queue
// over it, and the report that gates a training step's updates.
#include <cstdint>
#include <string>
#include <vector>

#include "python/src/bindings.h"
#include "python/src/common.h"
#include "python/src/py_graph.h"
#include "shardflow/chunk_queue_ops.h"
#include "shardflow/cluster.h"

namespace sf {
namespace python {

void BindSharedInput(py::module_& m) {
  m.def("plan_criteo_chunks", [](const std::vector<std::string>& files, int64_t chunk_bytes) {
          auto plan = ops::PlanCriteoChunks(files, chunk_bytes);
          if (!plan.ok()) throw StatusError(plan.status());
          return py::make_tuple(plan->files, plan->chunks);
        }, "(files, chunks): plain files cut every chunk_bytes, gzip files whole; chunks as file, begin, end triples.");
  m.def("chunk_queue", [](PyGraph& g, int64_t num_chunks, int64_t num_epochs, int64_t lease_ms,
                          const std::string& shared_name) {
          return g.Ret(ops::ChunkQueue(*g.g, num_chunks, {num_epochs, lease_ms}, shared_name));
        }, "A chunk queue handle (ChunkQueue node).");
  m.def("shared_criteo_batch_queue", [](PyGraph& g, const Out& queue, const std::vector<std::string>& files,
                                        const std::vector<int64_t>& chunks, int64_t worker, int64_t batch_size,
                                        int64_t capacity, bool skip_malformed, int64_t max_line_bytes,
                                        const std::string& name) {
          CriteoReaderOptions o;
          o.skip_malformed = skip_malformed;
          if (max_line_bytes > 0) o.max_line_bytes = max_line_bytes;  // else the reader's default
          ops::SharedCriteoInput in =
              ops::SharedCriteoBatchQueue(*g.g, g.O(queue), ops::CriteoChunkPlan{files, chunks}, o, worker,
                                          batch_size, capacity, name);
          if (!in.trained.valid()) g.Raise();
          g.CheckNoError();
          py::dict d;
          for (auto [key, out] : {std::pair<const char*, Output>{"label", in.label}, {"dense", in.dense},
                                  {"categorical", in.categorical}, {"ticket", in.ticket}, {"pos", in.pos},
                                  {"trained_ticket", in.trained_ticket}, {"trained_pos", in.trained_pos}})
            d[key] = ToOut(out);
          for (auto [key, op] : {std::pair<const char*, Operation>{"enqueue", in.enqueue}, {"close", in.close},
                                 {"cancel", in.cancel}, {"trained", in.trained}, {"release", in.release}})
            d[key] = op.node;
          return d;
        }, "One worker's reader and row queue over a chunk queue: a dict of (node, index) outputs and op node ids.");
  m.def("report_trained_before", [](PyGraph& g, int trained, int train) {
          g.N(trained);
          g.N(train);
          ops::SharedCriteoInput in;
          in.trained = Operation(g.g.get(), trained);
          Status s = ops::ReportTrainedBefore(*g.g, in, Operation(g.g.get(), train));
          if (!s.ok()) throw StatusError(s);
        }, "Makes every update the train op runs wait for the trained report (node ids).");
  m.attr("LOST_CHUNK_TEXT") = ops::kLostChunkText;
  m.attr("STALE_SHARD_MAP_TEXT") = kStaleShardMap;
}

}  // namespace python
}  // namespace sf

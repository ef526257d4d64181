// Embedding tables: dense and hash tables sharded over variable actors, and
// their lookups.
#include <cstdint>
#include <string>
#include <vector>

#include "python/src/bindings.h"
#include "python/src/common.h"
#include "python/src/py_graph.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"

namespace sf {
namespace python {

void BindEmbedding(py::module_& m) {
  py::class_<EmbeddingTable>(m, "EmbeddingTable")
      .def_readonly("name", &EmbeddingTable::name)
      .def_readonly("rows", &EmbeddingTable::rows)
      .def_readonly("dim", &EmbeddingTable::dim)
      .def_readonly("partition", &EmbeddingTable::partition)
      .def_readonly("hash", &EmbeddingTable::hash)
      .def_readonly("read_only", &EmbeddingTable::read_only)
      .def_property_readonly("shards", [](const EmbeddingTable& t) {
        std::vector<Out> r;
        for (const Output& o : t.shards) r.push_back(ToOut(o));
        return r;
      });
  m.def("embedding_table", [](PyGraph& g, const std::string& name, int64_t rows, int64_t dim, int64_t num_shards,
                              const std::string& partition, const std::string& initializer, double scale, int64_t seed,
                              bool trainable) {
          EmbeddingTableOptions o;
          o.num_shards = num_shards;
          o.partition = partition;
          o.initializer = initializer;
          o.scale = scale;
          o.seed = seed;
          o.trainable = trainable;
          EmbeddingTable t = NewEmbeddingTable(*g.g, name, rows, dim, o);
          if (!t.valid()) g.Raise();
          g.CheckNoError();
          return t;
        });
  m.def("hash_embedding_table", [](PyGraph& g, const std::string& name, int64_t dim, const py::dict& opts) {
          HashEmbeddingTableOptions o;
          for (const auto& [k, v] : opts) {
            const std::string key = py::str(k);
            if (key == "num_shards") o.num_shards = v.cast<int64_t>();
            else if (key == "initializer") o.initializer = v.cast<std::string>();
            else if (key == "scale") o.scale = v.cast<double>();
            else if (key == "seed") o.seed = v.cast<int64_t>();
            else if (key == "trainable") o.trainable = v.cast<bool>();
            else if (key == "min_count") o.min_count = v.cast<int64_t>();
            else if (key == "admit_probability") o.admit_probability = v.cast<double>();
            else if (key == "filter_width") o.filter_width = v.cast<int64_t>();
            else if (key == "filter_depth") o.filter_depth = v.cast<int64_t>();
            else if (key == "ttl_steps") o.ttl_steps = v.cast<int64_t>();
            else if (key == "max_rows") o.max_rows = v.cast<int64_t>();
            else if (key == "eviction") o.eviction = v.cast<std::string>();
            else if (key == "ram_budget_bytes") o.ram_budget_bytes = v.cast<int64_t>();
            else if (key == "cold_dir") o.cold_dir = v.cast<std::string>();
            else throw StatusError(InvalidArgument("hash embedding table '" + name + "': unknown option '" + key + "'"));
          }
          EmbeddingTable t = NewHashEmbeddingTable(*g.g, name, dim, o);
          if (!t.valid()) g.Raise();
          g.CheckNoError();
          return t;
        });
  m.def("read_only_view", [](const EmbeddingTable& t) { return ReadOnlyView(t); });
  m.def("embedding_lookup", [](PyGraph& g, const EmbeddingTable& t, const std::string& kind, const Out& ids,
                               py::object extra, int64_t num_segments, const std::string& combiner) {
          Output o;
          if (kind == "dense") o = ops::EmbeddingLookup(*g.g, t, g.O(ids), combiner);
          else if (kind == "bag") o = ops::EmbeddingLookupBag(*g.g, t, g.O(ids), g.O(extra.cast<Out>()), combiner);
          else if (kind == "segments")
            o = ops::EmbeddingLookupSegments(*g.g, t, g.O(ids), g.O(extra.cast<Out>()), num_segments, combiner);
          else throw StatusError(InvalidArgument("unknown lookup kind '" + kind + "'"));
          return g.Ret(o);
        });
}

}  // namespace python
}  // namespace sf

// Checkpoints: the in-graph save and restore ops, and reading checkpoint
// directories (sf.train.list_checkpoints and friends). A session's own
// save and restore are Session methods (bind_session.cc).
#include <cstdint>
#include <string>

#include "python/src/bindings.h"
#include "python/src/common.h"
#include "python/src/py_graph.h"
#include "shardflow/checkpoint.h"
#include "shardflow/checkpoint_ops.h"

namespace sf {
namespace python {

void BindCheckpoints(py::module_& m) {
  m.def("save_variables", [](PyGraph& g, const std::string& dir, const Out& step, const std::string& name) {
          return g.Ret(ops::SaveVariables(*g.g, dir, g.O(step), name));
        });
  m.def("restore_variables", [](PyGraph& g, const std::string& dir, const std::string& name) {
          Output step;
          Operation op = ops::RestoreVariables(*g.g, dir, &step, name);
          int id = g.RetOp(op.node);
          return py::make_tuple(id, step.valid() ? py::cast(ToOut(step)) : py::none());
        });

  m.def("checkpoint_list", [](const std::string& dir) { return Take(Take(CheckpointDir::Open(dir))->List()); });
  m.def("checkpoint_latest", [](const std::string& dir) { return Take(Take(CheckpointDir::Open(dir))->Latest()); });
  m.def("checkpoint_describe", [](const std::string& dir, int64_t id) {
          CheckpointDir::Summary s = Take(Take(CheckpointDir::Open(dir))->Describe(id));
          py::list vars;
          for (const auto& v : s.variables) vars.append(py::make_tuple(v.name, static_cast<int>(v.dtype), v.shape));
          py::dict d;
          d["id"] = s.id;
          d["global_step"] = s.global_step;
          d["parent"] = s.parent;
          d["variables"] = vars;
          return d;
        });
  m.def("checkpoint_read", [](const std::string& dir, int64_t id, const std::string& name) {
          return TensorToNumpy(Take(Take(CheckpointDir::Open(dir))->Read(id, name)));
        });
}

}  // namespace python
}  // namespace sf

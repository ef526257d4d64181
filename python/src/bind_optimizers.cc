// Optimizers: the C++ optimizers by name, with minimize and apply_gradients.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "python/src/bindings.h"
#include "python/src/common.h"
#include "python/src/py_graph.h"
#include "shardflow/optimizers.h"

namespace sf {
namespace python {

void BindOptimizers(py::module_& m) {
  py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "Optimizer")
      .def_property_readonly("name", &Optimizer::name)
      .def("set_learning_rate", [](Optimizer& o, PyGraph& g, const Out& lr) { o.SetLearningRate(g.O(lr)); })
      // keep_alive: the C++ optimizer keeps a raw pointer to `sparse` for its Minimize calls.
      .def("set_sparse_optimizer", [](Optimizer& o, Optimizer* sparse) { o.SetSparseOptimizer(sparse); },
           py::arg("sparse").none(true), py::keep_alive<1, 2>(),
           "Has `sparse` make the sparse updates of the embedding table shards minimize trains (None: this one).")
      .def("minimize", [](Optimizer& o, PyGraph& g, const Out& loss, const std::vector<Out>& var_list) {
             auto r = o.Minimize(*g.g, g.O(loss), g.Os(var_list));
             if (!r.ok()) {
               g.g->ClearError();
               throw StatusError(r.status());
             }
             g.CheckNoError();
             return r->node;
           }, "Adds gradients and updates; returns the training NoOp's node id.")
      .def("apply_gradients", [](Optimizer& o, PyGraph& g, const std::vector<std::pair<Out, Out>>& gv) {
             std::vector<std::pair<Output, Output>> pairs;
             for (const auto& [gr, v] : gv) pairs.emplace_back(g.O(gr), g.O(v));
             auto r = o.ApplyGradients(*g.g, pairs);
             if (!r.ok()) {
               g.g->ClearError();
               throw StatusError(r.status());
             }
             g.CheckNoError();
             return r->node;
           });
  m.def("optimizer", [](const std::string& kind, const std::vector<double>& p, bool flag) -> std::shared_ptr<Optimizer> {
          auto need = [&](size_t n) {
            if (p.size() != n) throw StatusError(InvalidArgument(kind + " takes " + std::to_string(n) + " parameters"));
          };
          if (kind == "GradientDescent") { need(1); return std::make_shared<GradientDescentOptimizer>(p[0]); }
          if (kind == "Momentum") { need(2); return std::make_shared<MomentumOptimizer>(p[0], p[1], flag); }
          if (kind == "Adagrad") { need(2); return std::make_shared<AdagradOptimizer>(p[0], p[1]); }
          if (kind == "Adam") { need(4); return std::make_shared<AdamOptimizer>(p[0], p[1], p[2], p[3]); }
          if (kind == "RMSProp") { need(4); return std::make_shared<RMSPropOptimizer>(p[0], p[1], p[2], p[3]); }
          throw StatusError(InvalidArgument("unknown optimizer '" + kind + "'"));
        }, "A C++ optimizer by name and hyperparameters.");
}

}  // namespace python
}  // namespace sf

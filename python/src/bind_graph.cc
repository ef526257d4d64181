// Graphs: the Graph class Python's sf.Graph wraps (nodes, outputs, scopes,
// attributes, graph files and bytes).
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "graph/device_name.h"
#include "python/src/bindings.h"
#include "python/src/common.h"
#include "python/src/py_graph.h"
#include "shardflow/graph.h"
#include "shardflow/graph_io.h"
#include "shardflow/op_registry.h"

namespace sf {
namespace python {

void BindGraph(py::module_& m) {
  py::class_<PyScope>(m, "Scope").def("close", &PyScope::Close, "Ends the scope (idempotent).");

  py::class_<PyGraph>(m, "Graph")
      .def(py::init<>(), "An empty graph over the standard ops.")
      .def("add_node",
           [](PyGraph& self, const std::string& op, const std::vector<Out>& inputs,
              const std::vector<std::tuple<std::string, std::string, py::object>>& attrs, const std::string& name,
              const std::vector<int>& control_inputs) {
             std::vector<Output> in = self.Os(inputs);
             AttrMap a = AttrsFromPy(attrs);
             for (int c : control_inputs) self.N(c);
             if (!StandardOpRegistry().Find(op)) throw StatusError(NotFound("no op named '" + op + "' is registered"));
             int id = self.g->AddNode(op, in, std::move(a), name);
             if (id < 0) self.Raise();
             for (int c : control_inputs) Check(self.g->AddControlInput(id, c));
             return id;
           },
           py::arg("op"), py::arg("inputs"), py::arg("attrs"), py::arg("name") = "",
           py::arg("control_inputs") = std::vector<int>{},
           "Adds a node; returns its id or raises the shape or attribute error naming node and op.")
      .def("add_control_input", [](PyGraph& self, int node, int before) { Check(self.g->AddControlInput(node, before)); },
           "Makes node run after before; raises InvalidArgumentError for an unknown node.")
      .def("num_nodes", [](PyGraph& self) { return self.g->num_nodes(); })
      .def("node_name", [](PyGraph& self, int id) { return self.N(id).name; })
      .def("node_op", [](PyGraph& self, int id) { return self.N(id).op; })
      .def("node_device", [](PyGraph& self, int id) { return self.N(id).device; })
      .def("node_inputs", [](PyGraph& self, int id) {
             std::vector<Out> r;
             for (const Output& o : self.N(id).inputs) r.push_back(ToOut(o));
             return r;
           })
      .def("node_control_inputs", [](PyGraph& self, int id) { return self.N(id).control_inputs; })
      .def("node_num_outputs", [](PyGraph& self, int id) { return self.N(id).num_outputs(); })
      .def("node_attrs", [](PyGraph& self, int id) {
             py::dict d;
             for (const auto& [k, v] : self.N(id).attrs.all()) d[py::str(k)] = py::make_tuple(AttrKindName(v), AttrToPy(v));
             return d;
           })
      .def("output_dtype", [](PyGraph& self, const Out& o) { return static_cast<int>(self.O(o).dtype()); })
      .def("output_shape", [](PyGraph& self, const Out& o) { return ShapeToPy(self.O(o).shape()); })
      .def("output_name", [](PyGraph& self, const Out& o) { return self.O(o).name(); })
      .def("find_node", [](PyGraph& self, const std::string& name) { return Take(self.g->FindNode(name)); },
           "The id of the node named name; raises NotFoundError.")
      .def("find_output", [](PyGraph& self, const std::string& name) { return ToOut(Take(self.g->FindOutput(name))); },
           "The (node, index) of 'name' or 'name:k'; raises NotFoundError or InvalidArgumentError.")
      .def("name_scope", [](PyGraph& self, const std::string& p) {
             return PyScope{std::make_unique<Graph::Scope>(self.g->NameScope(p))};
           })
      .def("device_scope", [](PyGraph& self, const std::string& d) {
             return PyScope{std::make_unique<Graph::Scope>(self.g->DeviceScope(d))};
           })
      .def("set_device", [](PyGraph& self, int id, const std::string& d) {
             self.N(id);
             if (!d.empty()) Take(ParseDeviceName(d));
             self.g->mutable_node(id).device = d;
           }, "Sets an existing node's requested device (tf.device(function)); InvalidArgumentError for a bad name.")
      .def("scoped_name", [](PyGraph& self, const std::string& base) { return self.g->ScopedName(base); })
      .def("set_attr", [](PyGraph& self, int id, const std::string& name, const std::string& kind, py::object v) {
             self.N(id);
             self.g->mutable_node(id).attrs.Set(name, AttrFromPy(name, kind, v));
           }, "Sets an attribute of an existing node (before any session runs it).")
      .def("status", [](PyGraph& self) { Check(self.g->status()); }, "Raises the graph's recorded error, if any.")
      .def("save", [](PyGraph& self, const std::string& path) { Check(SaveGraph(*self.g, path)); },
           "Writes the graph as a GraphDef file; raises on error (naming the file).")
      .def("to_bytes", [](PyGraph& self) { return py::bytes(Take(GraphToBytes(*self.g))); })
      .def_static("load", [](const std::string& path) {
             auto g = std::make_unique<PyGraph>();
             Check(LoadGraph(path, g->g.get()));
             return g;
           }, "A graph read from a GraphDef file; raises NotFoundError, DataLossError or InvalidArgumentError.")
      .def_static("from_bytes", [](py::bytes b, const std::string& source) {
             auto g = std::make_unique<PyGraph>();
             Check(GraphFromBytes(std::string(b), g->g.get(), source));
             return g;
           });
}

}  // namespace python
}  // namespace sf

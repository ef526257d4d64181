// The parts of shardflow._core, one function per concern (after ONNX Runtime's
// python/onnxruntime_pybind_*.cc): each adds its classes and functions to the
// module. module.cc calls them in this order, which is also the order the
// types they share are registered in.
#pragma once

#include "python/src/common.h"

namespace sf {
namespace python {

void BindErrors(py::module_& m);      // bind_errors.cc: Status -> sf.errors.*, code names
void BindTensors(py::module_& m);     // bind_tensors.cc: dtypes, NumPy round trips, lent-array releases
void BindOpRegistry(py::module_& m);  // bind_op_registry.cc: the registered ops for sf.ops
void BindGraph(py::module_& m);       // bind_graph.cc: Graph, scopes, graph files
void BindBuilders(py::module_& m);    // bind_builders.cc: variables, gradients, control flow, random, queues
void BindEmbedding(py::module_& m);   // bind_embedding.cc: embedding tables and lookups
void BindCheckpoints(py::module_& m); // bind_checkpoints.cc: in-graph save/restore, checkpoint directories
void BindOptimizers(py::module_& m);  // bind_optimizers.cc: the C++ optimizers
void BindSession(py::module_& m);     // bind_session.cc: Session, Callable, local sessions
void BindCluster(py::module_& m);     // bind_cluster.cc: cluster sessions and credentials
void BindSharedInput(py::module_& m); // bind_shared_input.cc: chunk queues and the shared Criteo input

}  // namespace python
}  // namespace sf

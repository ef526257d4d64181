// shardflow._core: the pybind11 bindings under `import shardflow`.
//
// Thin by design: graphs, builders that add more than one node, gradients,
// optimizers, control flow, sessions and checkpoints of the public API
// (include/shardflow/), with values crossing as plain Python data (the
// conventions are in common.h). The Python package (python/shardflow/)
// builds the TensorFlow-style API on top. Each concern binds itself in its
// own file (bindings.h lists them); this file only calls them.
#include "python/src/bindings.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "shardflow's C++ bindings; use the `shardflow` package instead.";
  sf::python::BindErrors(m);
  sf::python::BindTensors(m);
  sf::python::BindOpRegistry(m);
  sf::python::BindGraph(m);
  sf::python::BindBuilders(m);
  sf::python::BindEmbedding(m);
  sf::python::BindCheckpoints(m);
  sf::python::BindOptimizers(m);
  sf::python::BindSession(m);
  sf::python::BindCluster(m);
  sf::python::BindSharedInput(m);
}

// GraphDef: saving a Graph to a Cap'n Proto file (proto/graph_def.capnp) and
// loading it back.
//
//   SF_RETURN_IF_ERROR(sf::SaveGraph(g, "model.capnp"));
//   sf::Graph g2;
//   SF_RETURN_IF_ERROR(sf::LoadGraph("model.capnp", &g2));
//
// A saved node keeps its name, op, inputs (by node name and output index),
// control inputs, device and attrs; output dtypes and shapes are not stored
// but re-inferred, because loading adds every node through Graph::AddNode.
// Tensor attrs are stored as raw little-endian bytes; one tensor may hold at
// most 512 MiB (Cap'n Proto's limit on one Data blob).
// Thread-safety: free functions; the graph saved must not change meanwhile.
#pragma once

#include <string>

#include "shardflow/graph.h"
#include "shardflow/status.h"

namespace sf {

// Writes g to `path`; InvalidArgument if g has a construction error or a
// tensor too big to store, Unavailable naming the file if it cannot be written.
Status SaveGraph(const Graph& g, const std::string& path);

// Adds the nodes saved in `path` to the empty graph *g (through AddNode, with
// g's op registry). Returns NotFound if the file is missing, DataLoss if it is
// truncated or corrupt, InvalidArgument for a wrong format version, an unknown
// op, an input naming a missing node or a shape error; every message names the
// file. On error *g may hold some of the nodes and should be discarded.
Status LoadGraph(const std::string& path, Graph* g);

// The bytes SaveGraph would write; InvalidArgument as for SaveGraph.
Result<std::string> GraphToBytes(const Graph& g);

// LoadGraph from bytes in memory; `source` names them in error messages.
Status GraphFromBytes(const std::string& bytes, Graph* g,
                      const std::string& source = "<graph bytes>");

// The version written into every GraphDef; other versions are rejected.
uint32_t GraphDefFormatVersion();

}  // namespace sf

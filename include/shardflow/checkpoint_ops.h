// In-graph checkpoints, as in the paper: a Save op that writes variables'
// values into a checkpoint store, and a Restore op whose outputs Assign ops
// put back. They run where they are placed (on a cluster, the checkpoint
// directory is on that node), as any other op of a step.
//
//   auto save = sf::ops::SaveVariables(g, "/ckpt", step);     // int64 id per run
//   auto restore = sf::ops::RestoreVariables(g, "/ckpt");      // a target node
//   s.Run({{"step", sf::Tensor::Scalar<int64_t>(100)}}, {save});
//   s.Run({}, {}, {restore});
//
// The checkpoints are the ones Session::Save writes (storage/checkpoint.h):
// `shardflow ckpt` lists and verifies them, Session::Restore reads them.
#pragma once

#include <string>

#include "shardflow/graph.h"

namespace sf {
namespace ops {

// Adds a SaveCheckpoint node writing every variable of g (each VarHandle,
// optimizer slots included; they must be initialised when it runs) into the
// store in dir under global_step (int64 scalar); its output is the new
// checkpoint's id. An invalid Output (and the graph's status says why) when
// the graph has no variables or a bad input.
Output SaveVariables(Graph& g, const std::string& dir, Output global_step, const std::string& name = "save");
// Adds a RestoreCheckpoint node reading every variable of g from the newest
// committed checkpoint in dir that reads back intact, an Assign per
// variable, and a NoOp running them all: returns the NoOp (invalid on a
// graph error). When given, *global_step receives the restored checkpoint's
// global step output. A variable missing from the checkpoint or of another
// dtype fails the run naming it.
Operation RestoreVariables(Graph& g, const std::string& dir, Output* global_step = nullptr,
                     const std::string& name = "restore");

}  // namespace ops
}  // namespace sf

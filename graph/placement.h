// Placement: a full device name for every node of a graph, as a pure
// function (the runtime's plan.cc still places everything on one CPU until
// the distributed runtime of issue 4 calls this).
//
// Constraints, all hard:
// - Node::device (set by Graph::DeviceScope) is a partial device name the
//   node's device must match ("/job:ps" = any device of job ps).
// - Colocation groups must share one device. A group is the closure of
//   (a) the attr "_class": a string of one or more "loc:@NAME" entries
//       separated by commas or spaces (like TF's _class list; shardflow
//       attrs have no string list), colocating the node with node NAME;
//   (b) resource edges: a node that takes a resource tensor (a variable
//       handle: ReadVariable, Assign*, Apply*, an Identity or Enter of a
//       handle, ...) is colocated with that tensor's producer. Transitively
//       this puts a variable, its optimizer slots and every op that reads
//       or updates them together, so variable traffic never crosses devices.
//   The device requests of a group are merged (MergeDeviceNames).
//   Loop ops (Enter/Exit/Merge/Switch/NextIteration/LoopCond) of one frame
//   are NOT colocated: a loop may span devices, its edges become Send/Recv
//   and the executor keys them by frame and iteration at run time.
//
// Heuristic for the rest (greedy, in node id order, which is topological
// apart from loop back edges), among the devices a group's constraints allow:
// - a group holding a resource producer (a variable) goes round-robin over
//   the devices (PlacementOptions::spread_resources), to spread parameters;
// - any other group goes to the device holding most of its already placed
//   data inputs (ties: the earlier device in the list);
// - a group none of whose inputs is placed yet (Const, Placeholder, ops fed
//   only by those) is placed afterwards, in reverse order, on the device of
//   most of its consumers, so constants sit beside their users; with no
//   placed consumer either, on the first allowed device.
// Kernel availability is not checked (every op has a CPU kernel today).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "shardflow/graph.h"
#include "shardflow/status.h"

namespace sf {

struct PlacementOptions {
  // Round-robin variables (and other resource producers) over the devices;
  // false places them like compute (first allowed device when unconstrained).
  bool spread_resources = true;
};

// The colocation group of every node: the smallest node id of its group.
// InvalidArgument naming the node when a "_class" entry is malformed or names
// a node not in the graph.
Result<std::vector<int>> ColocationGroups(const Graph& g);

// The canonical full device (one of `devices`) of every node, by node id.
// InvalidArgument when `devices` is empty, holds a duplicate or a name that is
// not a full device name; when a node requests a device matching none of
// `devices` (naming the node, its request and the devices); when colocated
// nodes request conflicting devices (naming both nodes and requests); or when
// g has a construction error.
Result<std::vector<std::string>> Place(const Graph& g, const std::vector<std::string>& devices,
                                       PlacementOptions options = {});

}  // namespace sf

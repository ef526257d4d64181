// Partitioning: splitting a placed graph into one graph per device, each
// cross-device edge replaced by a _Send in the producer's partition and a
// _Recv in the consumer's. Pure functions; the runtime of issue 4 registers
// the partitions on their devices and runs them.
//
// Transfers:
// - Data edge src:out (device A) -> consumer (device B): ONE _Send/_Recv
//   pair per (tensor, destination device), however many consumers on B read
//   it. Attrs on both: tensor_name (the edge key "src:out->B"), send_device
//   (A), recv_device (B), dtype and shape (the tensor's declared ones).
// - Control edge c (device A) -> n (device B): a scalar int32 Const on A
//   with a control input on c, sent under the key "^c->B"; on B, n gets a
//   control input on the _Recv. One pair per (c, B). A dead c makes the Const,
//   hence the transfer, dead, so the dead-ness reaches n as on one device.
// The key is static and unique per transfer within one graph. At run time
// the executor completes it to (step, key, frame, iteration): frame and
// iteration are those of the sending node's current execution, known only
// then, so the partition stores the static key only.
// - Loops spanning devices: every partition holding a _Recv of a value of a
//   loop frame gets a "control loop" for that frame (Const -> Enter -> Merge
//   -> Switch(pred) -> Identity pivot -> NextIteration, and an Exit; added
//   nodes have original_id -1), pred being the frame's LoopCond, received
//   from its device when elsewhere (that _Recv takes a control input on the
//   Merge). Each such _Recv takes a control input on the pivot, so it runs
//   once per iteration in the frame and goes dead when the loop ends, as in
//   TensorFlow's partitioner. A spanning loop nested in another loop is
//   Unimplemented.
// Original nodes keep their name, op, attrs, device (the placed one, in
// Node::device), declared output dtypes and shapes; their inputs point into
// their partition. Loop back edges (NextIteration -> Merge) are kept.
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardflow/graph.h"
#include "shardflow/status.h"

namespace sf {

struct PartitionGraph {
  std::string device;  // canonical full device name
  // The partition's nodes, over the original graph's op registry. A pointer
  // because Graph is not movable.
  std::unique_ptr<Graph> graph;
  // Partition node id -> original node id; -1 for the _Send, _Recv and
  // control Consts added by partitioning.
  std::vector<int> original_id;
  // Original node id -> partition node id, for the original nodes placed here.
  std::map<int, int> local_id;
  std::vector<int> sends;  // ids of the _Send nodes, in creation order
  std::vector<int> recvs;  // ids of the _Recv nodes, in creation order
};

// Where an original node landed.
struct NodeLocation {
  std::string device;
  int id = -1;  // in that partition's graph
};

// One partition per device used by `placement` (by node id, full device
// names as Place returns them), keyed by canonical device name. A graph on one
// device gives one partition with no _Send/_Recv. InvalidArgument when
// placement's size is not the node count, or an entry is not a full device
// name (naming the node); g's construction error when it has one; Internal
// if a partition cannot be rebuilt (a bug).
Result<std::map<std::string, PartitionGraph>> Partition(const Graph& g,
                                                        const std::vector<std::string>& placement);

// Where original node `original_id` is; NotFound when no partition holds it.
Result<NodeLocation> FindNodeInPartitions(const std::map<std::string, PartitionGraph>& parts,
                                          int original_id);

// The edge key of output `out` of node `src` sent to `recv_device`:
// "src:out->recv_device"; for a control edge (out < 0) "^src->recv_device".
std::string TransferKey(const std::string& src, int out, const std::string& recv_device);

namespace ops {
// A _Send of x under `key` from send_device to recv_device; returns its node id.
int Send(Graph& g, Output x, const std::string& key, const std::string& send_device,
         const std::string& recv_device, const std::string& name = "");
// A _Recv of a (dtype, shape) tensor sent under `key`; its output.
Output Recv(Graph& g, DType dtype, PartialShape shape, const std::string& key,
            const std::string& send_device, const std::string& recv_device, const std::string& name = "");
}  // namespace ops

}  // namespace sf

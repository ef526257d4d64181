#include "graph/partition.h"

#include <set>
#include <tuple>

#include "graph/device_name.h"
#include "shardflow/control_flow.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

// "/job:w/task:0/device:CPU:1" -> "job_w_task_0_device_CPU_1", for node names.
std::string Sanitize(const std::string& device) {
  std::string s;
  for (char c : device) {
    if (c == '/' && s.empty()) continue;
    s += (c == '/' || c == ':') ? '_' : c;
  }
  return s;
}

class Partitioner {
 public:
  Partitioner(const Graph& g, std::vector<std::string> dev) : g_(g), dev_(std::move(dev)) {
    for (int id = 0; id < g.num_nodes(); ++id) reserved_.insert(g.node(id).name);
  }

  Result<std::map<std::string, PartitionGraph>> Run() {
    for (int id = 0; id < g_.num_nodes(); ++id) SF_RETURN_IF_ERROR(AddOriginal(id));
    for (const BackEdge& b : back_edges_) {
      PartitionGraph& p = Part(dev_[b.src]);
      p.graph->mutable_node(b.node).inputs[b.input] = Output(p.graph.get(), p.local_id.at(b.src), b.out);
    }
    SF_RETURN_IF_ERROR(FlushSends());
    FindSinkNoOps();
    for (int id = 0; id < g_.num_nodes(); ++id) SF_RETURN_IF_ERROR(AddControlEdges(id));
    SF_RETURN_IF_ERROR(AddControlLoops());
    SF_RETURN_IF_ERROR(FlushSends());
    return std::move(parts_);
  }

 private:
  struct BackEdge {
    int node;  // partition id of the Merge
    size_t input;
    int src;   // original id of the NextIteration
    int out;
  };
  struct PendingSend {
    int src;
    int out;
    std::string dst;
    std::string key;
  };

  // Adds the _Send of every transfer recorded since the last call.
  Status FlushSends() {
    for (; flushed_ < sends_.size(); ++flushed_) {
      const PendingSend s = sends_[flushed_];
      PartitionGraph& p = Part(dev_[s.src]);
      const Output x(p.graph.get(), p.local_id.at(s.src), s.out);
      SF_RETURN_IF_ERROR(AddSend(p, x, s.key, s.dst, "_Send/" + g_.node(s.src).name + "_" +
                                                          std::to_string(s.out) + "/to_" + Sanitize(s.dst)));
    }
    return Status::OK();
  }

  // A loop frame of the original graph (0 = the root frame).
  struct FrameInfo {
    std::string name;
    int parent = -1;
    int loop_cond = -1;  // original id of the frame's LoopCond
    int64_t parallel_iterations = 10;
  };

  // The frame each original node's outputs are in, as the control-flow
  // executor derives it (nodes are in topological order apart from back
  // edges); fills frames_.
  std::vector<int> OutFrames() {
    frames_.assign(1, FrameInfo());
    std::map<std::pair<int, std::string>, int> ids;
    std::vector<int> out(g_.num_nodes(), -1);
    for (int id = 0; id < g_.num_nodes(); ++id) {
      const Node& n = g_.node(id);
      int f = -1;
      for (const Output& in : n.inputs)
        if (f < 0 && out[in.node] >= 0) f = out[in.node];
      for (int c : n.control_inputs)
        if (f < 0 && out[c] >= 0) f = out[c];
      if (f < 0) f = 0;
      out[id] = f;
      if (n.op == "Enter") {
        const std::string name = n.attrs.GetOr<std::string>("frame_name", "").value();
        auto it = ids.find({f, name});
        if (it == ids.end()) {
          FrameInfo info;
          info.name = name;
          info.parent = f;
          info.parallel_iterations = n.attrs.GetOr<int64_t>("parallel_iterations", 10).value();
          it = ids.emplace(std::make_pair(f, name), static_cast<int>(frames_.size())).first;
          frames_.push_back(info);
        }
        out[id] = it->second;
      } else if (n.op == "Exit") {
        out[id] = f > 0 ? frames_[f].parent : 0;
      } else if (n.op == "LoopCond" && f > 0) {
        frames_[f].loop_cond = id;
      }
    }
    return out;
  }

  // Gives each partition that receives values inside a loop frame a copy of
  // the loop's control structure (as TensorFlow's partitioner does):
  //   Const -> Enter -> Merge -> Switch(pred) -> Identity (the pivot)
  //                        ^------ NextIteration <-----'   Switch:0 -> Exit
  // with pred the frame's LoopCond (a _Recv of it from the loop's home
  // device, the LoopCond's, taking a control input on the Merge so it runs in
  // the frame). Each _Recv of a value of the frame takes a control input on
  // the pivot: it then runs once per iteration, in the same frame instance
  // and iteration as its _Send (the executors key transfers by both), and
  // goes dead with the pivot when the loop ends. Loops nested in another
  // loop are not split: Unimplemented.
  Status AddControlLoops() {
    if (recv_src_.empty()) return Status::OK();
    const std::vector<int> out = OutFrames();
    for (auto& [device, p] : parts_) {
      std::map<int, std::vector<int>> frame_recvs;  // frame -> recv ids in p
      for (int r : p.recvs) {
        auto it = recv_src_.find({device, r});
        if (it == recv_src_.end()) continue;
        const int f = out[it->second];
        if (f > 0) frame_recvs[f].push_back(r);
      }
      for (const auto& [f, recvs] : frame_recvs) {
        const FrameInfo& info = frames_[f];
        if (info.parent != 0)
          return Unimplemented("loop frame '" + info.name + "' is nested in loop '" +
                               frames_[info.parent].name +
                               "' and spans devices; place a nested loop's ops on one device");
        if (info.loop_cond < 0)
          return InvalidArgument("loop frame '" + info.name + "' spans devices but has no LoopCond");
        SF_RETURN_IF_ERROR(AddControlLoop(p, info, recvs));
      }
    }
    return Status::OK();
  }

  // Records a node added by a builder in p; Internal when the builder failed.
  Result<int> Adopt(PartitionGraph& p, const Output& o, const std::string& what) {
    if (!o.valid() || !p.graph->status().ok())
      return Internal("partition for " + p.device + ": cannot add " + what + ": " +
                      p.graph->status().message());
    p.graph->mutable_node(o.node).device = p.device;
    while (static_cast<int>(p.original_id.size()) < p.graph->num_nodes()) p.original_id.push_back(-1);
    return o.node;
  }

  Status AddControlLoop(PartitionGraph& p, const FrameInfo& info, const std::vector<int>& recvs) {
    Graph& g = *p.graph;
    const std::string base = "_ControlLoop/" + info.name;
    AttrMap zero;
    zero.Set("value", Tensor::Scalar<int32_t>(0));
    SF_ASSIGN_OR_RETURN(int c, Add(p, "Const", {}, zero, FreshName(p, base + "/zero"), -1));
    Output enter = ops::Enter(g, Output(&g, c, 0), info.name, false, info.parallel_iterations,
                              FreshName(p, base + "/enter"));
    SF_RETURN_IF_ERROR(Adopt(p, enter, "a control loop Enter").status());
    Output merge = ops::Merge(g, {enter, enter}, FreshName(p, base + "/merge"))[0];
    SF_RETURN_IF_ERROR(Adopt(p, merge, "a control loop Merge").status());
    Output pred;
    int pred_recv = -1;
    if (dev_[info.loop_cond] == p.device) {
      pred = Output(&g, p.local_id.at(info.loop_cond), 0);
    } else {
      SF_ASSIGN_OR_RETURN(pred, RecvFor(Output(const_cast<Graph*>(&g_), info.loop_cond, 0), p.device));
      pred_recv = pred.node;
      SF_RETURN_IF_ERROR(g.AddControlInput(pred_recv, merge.node));
    }
    auto sw = ops::Switch(g, merge, pred, FreshName(p, base + "/switch"));
    SF_RETURN_IF_ERROR(Adopt(p, sw.empty() ? Output() : sw[0], "a control loop Switch").status());
    Output pivot = ops::Identity(g, sw[1], FreshName(p, base + "/pivot"));
    SF_RETURN_IF_ERROR(Adopt(p, pivot, "a control loop pivot").status());
    Output next = ops::NextIteration(g, pivot, FreshName(p, base + "/next_iteration"));
    SF_RETURN_IF_ERROR(Adopt(p, next, "a control loop NextIteration").status());
    g.mutable_node(merge.node).inputs[1] = next;
    Output exit = ops::Exit(g, sw[0], FreshName(p, base + "/exit"));
    SF_RETURN_IF_ERROR(Adopt(p, exit, "a control loop Exit").status());
    for (int r : recvs)
      if (r != pred_recv) SF_RETURN_IF_ERROR(g.AddControlInput(r, pivot.node));
    return Status::OK();
  }

  PartitionGraph& Part(const std::string& device) {
    auto it = parts_.find(device);
    if (it == parts_.end()) {
      PartitionGraph p;
      p.device = device;
      p.graph = std::make_unique<Graph>(g_.registry());
      it = parts_.emplace(device, std::move(p)).first;
    }
    return it->second;
  }

  // A name for an added node that no original node has (so original nodes
  // keep their names) and that is free in p.
  std::string FreshName(const PartitionGraph& p, const std::string& base) const {
    std::string name = base;
    for (int k = 1; reserved_.count(name) || p.graph->FindNode(name).ok(); ++k)
      name = base + "_" + std::to_string(k);
    return name;
  }

  // Adds a node to p, recording where it came from; Internal on failure.
  Result<int> Add(PartitionGraph& p, const std::string& op, const std::vector<Output>& inputs,
                  const AttrMap& attrs, const std::string& name, int original) {
    const int id = p.graph->AddNode(op, inputs, attrs, name);
    if (id < 0)
      return Internal("partition for " + p.device + ": cannot add node '" + name +
                      "': " + p.graph->status().message());
    if (p.graph->node(id).name != name)
      return Internal("partition for " + p.device + ": node '" + name + "' was renamed '" +
                      p.graph->node(id).name + "'");
    p.graph->mutable_node(id).device = p.device;
    p.original_id.push_back(original);
    if (original >= 0) p.local_id[original] = id;
    return id;
  }

  Status AddSend(PartitionGraph& p, Output x, const std::string& key, const std::string& dst,
                 const std::string& base) {
    const std::string name = FreshName(p, base);
    const int id = ops::Send(*p.graph, x, key, p.device, dst, name);
    if (id < 0)
      return Internal("partition for " + p.device + ": cannot add '" + name + "': " +
                      p.graph->status().message());
    p.graph->mutable_node(id).device = p.device;
    p.original_id.push_back(-1);
    p.sends.push_back(id);
    return Status::OK();
  }

  Result<int> AddRecv(PartitionGraph& p, DType dtype, PartialShape shape, const std::string& key,
                      const std::string& src_device, const std::string& base) {
    const std::string name = FreshName(p, base);
    Output r = ops::Recv(*p.graph, dtype, std::move(shape), key, src_device, p.device, name);
    if (!r.valid())
      return Internal("partition for " + p.device + ": cannot add '" + name + "': " +
                      p.graph->status().message());
    p.graph->mutable_node(r.node).device = p.device;
    p.original_id.push_back(-1);
    p.recvs.push_back(r.node);
    return r.node;
  }

  // The _Recv in `dst` of original tensor `in`, made on first use.
  Result<Output> RecvFor(const Output& in, const std::string& dst) {
    PartitionGraph& p = Part(dst);
    auto k = std::make_tuple(in.node, in.index, dst);
    auto it = recvs_.find(k);
    if (it != recvs_.end()) return Output(p.graph.get(), it->second, 0);
    const Node& src = g_.node(in.node);
    const std::string key = TransferKey(src.name, in.index, dst);
    SF_ASSIGN_OR_RETURN(int id, AddRecv(p, src.output_dtypes[in.index], src.output_shapes[in.index], key,
                                        dev_[in.node], "_Recv/" + src.name + "_" + std::to_string(in.index)));
    recvs_[k] = id;
    recv_src_[{dst, id}] = in.node;
    sends_.push_back({in.node, in.index, dst, key});
    return Output(p.graph.get(), id, 0);
  }

  Status AddOriginal(int id) {
    const Node& n = g_.node(id);
    PartitionGraph& p = Part(dev_[id]);
    std::vector<Output> inputs;
    std::vector<size_t> pending;
    int stand_in = -1;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const Output& in = n.inputs[k];
      if (dev_[in.node] != p.device) {
        SF_ASSIGN_OR_RETURN(Output r, RecvFor(in, p.device));
        inputs.push_back(r);
        stand_in = static_cast<int>(k);
        continue;
      }
      auto it = p.local_id.find(in.node);
      if (it == p.local_id.end()) {
        pending.push_back(k);
        inputs.emplace_back();
        continue;
      }
      inputs.emplace_back(p.graph.get(), it->second, in.index);
      stand_in = static_cast<int>(k);
    }
    // Only a loop's Merge may read a node added after it (its NextIteration):
    // it is added with another input in that place and patched at the end.
    if (!pending.empty() && (n.op != "Merge" || stand_in < 0))
      return Internal("node '" + n.name + "' reads a node defined after it that is not a loop back edge");
    for (size_t k : pending) inputs[k] = inputs[stand_in];
    SF_ASSIGN_OR_RETURN(int local, Add(p, n.op, inputs, n.attrs, n.name, id));
    // The original's declared types and shapes: a shape function may see less
    // here (a Const input on another device arrives as a _Recv).
    Node& copy = p.graph->mutable_node(local);
    copy.output_dtypes = n.output_dtypes;
    copy.output_shapes = n.output_shapes;
    for (size_t k : pending) back_edges_.push_back({local, k, n.inputs[k].node, n.inputs[k].index});
    return Status::OK();
  }

  // A NoOp in the root frame that reads nothing and that nothing reads or
  // waits for (a training step's grouping target) only marks the end of
  // its control inputs; a step ends when every partition of it has, and
  // PlanDeviceSteps runs every node of the run in its own partition, so its
  // control inputs on other devices need no transfer: each would cost a
  // step one more message between devices, on its critical path.
  void FindSinkNoOps() {
    std::vector<bool> read(g_.num_nodes(), false);
    for (int id = 0; id < g_.num_nodes(); ++id) {
      for (const Output& in : g_.node(id).inputs) read[in.node] = true;
      for (int c : g_.node(id).control_inputs) read[c] = true;
    }
    const std::vector<int> frames = OutFrames();
    for (int id = 0; id < g_.num_nodes(); ++id) {
      const Node& n = g_.node(id);
      if (n.op == "NoOp" && n.inputs.empty() && !read[id] && frames[id] == 0) sink_noops_.insert(id);
    }
  }

  Status AddControlEdges(int id) {
    const Node& n = g_.node(id);
    PartitionGraph& p = Part(dev_[id]);
    const int local = p.local_id.at(id);
    for (int c : n.control_inputs) {
      if (dev_[c] == p.device) {
        SF_RETURN_IF_ERROR(p.graph->AddControlInput(local, p.local_id.at(c)));
        continue;
      }
      if (sink_noops_.count(id)) continue;
      auto k = std::make_pair(c, p.device);
      auto it = control_recvs_.find(k);
      if (it == control_recvs_.end()) {
        PartitionGraph& sp = Part(dev_[c]);
        const std::string& cname = g_.node(c).name;
        const std::string key = TransferKey(cname, -1, p.device);
        AttrMap value;
        value.Set("value", Tensor::Scalar<int32_t>(0));
        const std::string dummy_name =
            FreshName(sp, "_ControlDummy/" + cname + "/to_" + Sanitize(p.device));
        SF_ASSIGN_OR_RETURN(int dummy, Add(sp, "Const", {}, value, dummy_name, -1));
        SF_RETURN_IF_ERROR(sp.graph->AddControlInput(dummy, sp.local_id.at(c)));
        SF_RETURN_IF_ERROR(AddSend(sp, Output(sp.graph.get(), dummy, 0), key, p.device,
                                   "_SendControl/" + cname + "/to_" + Sanitize(p.device)));
        SF_ASSIGN_OR_RETURN(int recv, AddRecv(p, DType::kInt32, PartialShape(Shape{}), key, sp.device,
                                              "_RecvControl/" + cname));
        it = control_recvs_.emplace(k, recv).first;
        recv_src_[{p.device, recv}] = c;
      }
      SF_RETURN_IF_ERROR(p.graph->AddControlInput(local, it->second));
    }
    return Status::OK();
  }

  const Graph& g_;
  const std::vector<std::string> dev_;
  std::set<std::string> reserved_;
  std::map<std::string, PartitionGraph> parts_;
  std::map<std::tuple<int, int, std::string>, int> recvs_;  // (src, out, dst) -> recv id in dst
  std::map<std::pair<int, std::string>, int> control_recvs_;  // (src, dst) -> recv id in dst
  std::set<int> sink_noops_;  // original ids (FindSinkNoOps)
  std::vector<PendingSend> sends_;
  size_t flushed_ = 0;  // sends_ already added
  std::map<std::pair<std::string, int>, int> recv_src_;  // (device, recv id) -> original source
  std::vector<FrameInfo> frames_;
  std::vector<BackEdge> back_edges_;
};

}  // namespace

std::string TransferKey(const std::string& src, int out, const std::string& recv_device) {
  if (out < 0) return "^" + src + "->" + recv_device;
  return src + ":" + std::to_string(out) + "->" + recv_device;
}

Result<std::map<std::string, PartitionGraph>> Partition(const Graph& g,
                                                        const std::vector<std::string>& placement) {
  SF_RETURN_IF_ERROR(g.status());
  if (static_cast<int>(placement.size()) != g.num_nodes())
    return InvalidArgument("the placement has " + std::to_string(placement.size()) +
                           " devices for a graph of " + std::to_string(g.num_nodes()) + " nodes");
  std::vector<std::string> dev(placement.size());
  std::map<std::string, std::string> canonical;
  for (int id = 0; id < g.num_nodes(); ++id) {
    auto it = canonical.find(placement[id]);
    if (it == canonical.end()) {
      auto d = ParseFullDeviceName(placement[id]);
      if (!d.ok()) return d.status().WithPrefix("node '" + g.node(id).name + "'");
      it = canonical.emplace(placement[id], d->ToString()).first;
    }
    dev[id] = it->second;
  }
  return Partitioner(g, std::move(dev)).Run();
}

Result<NodeLocation> FindNodeInPartitions(const std::map<std::string, PartitionGraph>& parts,
                                          int original_id) {
  for (const auto& [device, p] : parts) {
    auto it = p.local_id.find(original_id);
    if (it != p.local_id.end()) return NodeLocation{device, it->second};
  }
  return NotFound("node " + std::to_string(original_id) + " is in no partition");
}

}  // namespace sf

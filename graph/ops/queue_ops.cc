// Queue ops: FIFOQueue, RandomShuffleQueue, PaddingFIFOQueue (handles),
// QueueEnqueue, QueueEnqueueMany, QueueDequeue, QueueDequeueMany,
// QueueDequeueUpTo, QueueClose, QueueSize, and their builders (include/shardflow/queue_ops.h).
//
// A queue op yields a resource scalar naming the session's queue (one queue
// actor); the other ops reach it through the QueueService. Shape functions
// check components against the queue's declared types and shapes when the
// handle comes straight from a queue op, so most mistakes fail at build time.
#include <limits>

#include "graph/op_registry.h"
#include "kernels/queue_service.h"
#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"

namespace sf {
namespace {

bool IsQueueOp(const std::string& op) {
  return op == "FIFOQueue" || op == "RandomShuffleQueue" || op == "PaddingFIFOQueue";
}

// The queue node behind input 0 (null when it is not visibly a queue op);
// an error when input 0 is not a handle at all.
Result<const Node*> QueueInput(InferenceContext& c) {
  if (c.num_inputs() < 1 || c.input_dtype(0) != DType::kResource)
    return c.Error("input 0 must be a queue handle (resource), got " +
                   std::string(c.num_inputs() ? DTypeName(c.input_dtype(0)) : "nothing"));
  const Node& p = c.graph().node(c.node().inputs[0].node);
  if (p.op == "VarHandle") return c.Error("input 0 is the variable '" + p.name + "', not a queue");
  return IsQueueOp(p.op) ? &p : nullptr;
}

// The queue's shared name and spec, from its node.
Result<std::pair<std::string, QueueSpec>> SpecOfNode(const Node& q) {
  SF_ASSIGN_OR_RETURN(std::string name, q.attrs.Get<std::string>("shared_name"));
  SF_ASSIGN_OR_RETURN(QueueSpec spec, QueueSpecFromAttrs(q.op, q.attrs));
  return std::make_pair(name, spec);
}

Status QueueShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(std::string name, c.Attr<std::string>("shared_name"));
  if (name.empty()) return c.Error(c.node().op + " needs a non-empty shared_name");
  SF_ASSIGN_OR_RETURN(QueueSpec spec, QueueSpecFromAttrs(c.node().op, c.attrs()));
  SF_RETURN_IF_ERROR(ValidateQueueSpec(name, spec));
  c.set_output(0, DType::kResource, PartialShape(Shape{}));
  return Status::OK();
}

// many: each component carries a batch (dimension 0) of elements.
Status EnqueueShape(InferenceContext& c, bool many) {
  SF_ASSIGN_OR_RETURN(const Node* q, QueueInput(c));
  SF_RETURN_IF_ERROR(c.AttrOr<int64_t>("timeout_ms", 0).status());
  if (!q) return Status::OK();
  SF_ASSIGN_OR_RETURN(auto ns, SpecOfNode(*q));
  const std::string& name = ns.first;
  const QueueSpec& spec = ns.second;
  const int given = c.num_inputs() - 1;
  if (given != static_cast<int>(spec.component_types.size()))
    return c.Error("queue '" + name + "' has " + std::to_string(spec.component_types.size()) +
                   " components, got " + std::to_string(given));
  for (int i = 0; i < given; ++i) {
    const DType t = c.input_dtype(i + 1);
    if (t != spec.component_types[i])
      return c.Error("queue '" + name + "' component " + std::to_string(i) + " is " +
                     DTypeName(spec.component_types[i]) + ", got " + DTypeName(t));
    PartialShape s = c.input_shape(i + 1);
    if (many && s.rank_known()) {
      if (s.rank() == 0)
        return c.Error("queue '" + name + "' component " + std::to_string(i) +
                       ": enqueue_many needs a batch dimension, got a scalar");
      s = PartialShape(Shape(s.dims().begin() + 1, s.dims().end()));
    }
    if (!spec.shapes.empty() && !spec.shapes[i].CompatibleWith(s))
      return c.Error("queue '" + name + "' component " + std::to_string(i) + " has shape " +
                     spec.shapes[i].ToString() + ", got " + (many ? "elements of shape " : "shape ") +
                     s.ToString());
  }
  return Status::OK();
}

// many: DequeueMany's [n, ...]; up_to: DequeueUpTo's [?, ...] (fewer than n
// once the queue is closed).
Status DequeueShape(InferenceContext& c, bool many, bool up_to = false) {
  SF_ASSIGN_OR_RETURN(const Node* q, QueueInput(c));
  SF_ASSIGN_OR_RETURN(std::vector<DType> types, c.Attr<std::vector<DType>>("component_types"));
  SF_RETURN_IF_ERROR(c.AttrOr<int64_t>("timeout_ms", 0).status());
  std::vector<PartialShape> shapes(types.size());
  if (q) {
    SF_ASSIGN_OR_RETURN(auto ns, SpecOfNode(*q));
    if (ns.second.component_types != types)
      return c.Error("component_types do not match those of queue '" + ns.first + "'");
    if (!ns.second.shapes.empty()) shapes = ns.second.shapes;
  }
  int64_t n = -1;
  if (many) {
    const DType nt = c.input_dtype(1);
    if (nt != DType::kInt32 && nt != DType::kInt64)
      return c.Error(std::string("n must be int32 or int64, got ") + DTypeName(nt));
    if (const Tensor* v = c.input_constant(1)) {
      if (v->num_elements() != 1) return c.Error("n must be a scalar, got " + v->DebugString(0));
      n = v->scalar_as<int64_t>();
      if (n < 1)
        return c.Error(std::string(up_to ? "dequeue_up_to" : "dequeue_many") + " needs n >= 1, got " +
                       std::to_string(n));
    }
    if (up_to) n = -1;
  }
  for (size_t i = 0; i < types.size(); ++i) {
    PartialShape s = shapes[i];
    if (many) {
      if (s.rank_known()) {
        Shape d{n};
        d.insert(d.end(), s.dims().begin(), s.dims().end());
        s = PartialShape(d);
      }
    }
    c.set_output(static_cast<int>(i), types[i], s);
  }
  return Status::OK();
}

}  // namespace

Status RegisterQueueOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("FIFOQueue")
      .RequiredAttr<std::string>("shared_name").State(StateAttr::kName).RequiredAttr<std::vector<DType>>("component_types")
      .Attr("shapes", std::vector<int64_t>{}).Attr("capacity", int64_t{-1})
      .Inputs(0).Stateful().Shape(QueueShape).NotDifferentiable()
      .Summary("A first-in first-out queue actor (attrs shared_name, component_types, shapes, capacity).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("RandomShuffleQueue")
      .RequiredAttr<std::string>("shared_name").State(StateAttr::kName).RequiredAttr<std::vector<DType>>("component_types")
      .Attr("shapes", std::vector<int64_t>{}).Attr("capacity", int64_t{-1})
      .Attr("min_after_dequeue", int64_t{0}).Attr("seed", int64_t{0})
      .Inputs(0).Stateful().Shape(QueueShape)
      .NotDifferentiable()
      .Summary("A queue actor dequeuing in random order (attrs as FIFOQueue plus min_after_dequeue, seed).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("PaddingFIFOQueue")
      .RequiredAttr<std::string>("shared_name").State(StateAttr::kName).RequiredAttr<std::vector<DType>>("component_types")
      .Attr("shapes", std::vector<int64_t>{}).Attr("capacity", int64_t{-1})
      .Inputs(0).Stateful().Shape(QueueShape)
      .NotDifferentiable()
      .Summary("A FIFO queue actor whose dequeue_many pads elements to the batch's largest shape.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("QueueEnqueue")
      .Attr("timeout_ms", int64_t{0})
      .Inputs(2, -1).Stateful()
      .Shape([](InferenceContext& c) { return EnqueueShape(c, false); }).NotDifferentiable()
      .Summary("Adds one element (inputs 1..) to a queue, waiting while it is full (attr timeout_ms).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("QueueEnqueueMany")
      .Attr("timeout_ms", int64_t{0})
      .Inputs(2, -1).Stateful()
      .Shape([](InferenceContext& c) { return EnqueueShape(c, true); }).NotDifferentiable()
      .Summary("Adds a batch of elements (dimension 0 of inputs 1..) to a queue.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("QueueDequeue")
      .RequiredAttr<std::vector<DType>>("component_types").Attr("timeout_ms", int64_t{0})
      .Inputs(1).Stateful()
      .Shape([](InferenceContext& c) { return DequeueShape(c, false); }).NotDifferentiable()
      .Summary("Removes one element from a queue, waiting while it is empty (attrs component_types, "
               "timeout_ms).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("QueueDequeueMany")
      .InputNames({"queue", "n"})
      .RequiredAttr<std::vector<DType>>("component_types").Attr("timeout_ms", int64_t{0})
      .Inputs(2).Stateful()
      .Shape([](InferenceContext& c) { return DequeueShape(c, true); }).NotDifferentiable()
      .Summary("Removes n (input 1) elements from a queue, stacked per component.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("QueueDequeueUpTo")
      .InputNames({"queue", "n"})
      .RequiredAttr<std::vector<DType>>("component_types").Attr("timeout_ms", int64_t{0})
      .Attr("wait_for_n", true)
      .Inputs(2).Stateful()
      .Shape([](InferenceContext& c) { return DequeueShape(c, true, true); }).NotDifferentiable()
      .Summary("As QueueDequeueMany, but a closed queue gives the fewer than n elements it has left "
               "(OutOfRange once empty); attr wait_for_n false: as soon as one element is there, what there is.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("QueueClose")
      .Attr("cancel_pending_enqueues", false)
      .Inputs(1).Stateful()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(QueueInput(c).status());
        return c.AttrOr<bool>("cancel_pending_enqueues", false).status();
      })
      .NotDifferentiable()
      .Summary("Closes a queue; attr cancel_pending_enqueues fails enqueues waiting for room.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("QueueSize").Inputs(1).Stateful()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(QueueInput(c).status());
        c.set_output(0, DType::kInt32, PartialShape(Shape{}));
        return Status::OK();
      })
      .NotDifferentiable().Summary("The number of elements in a queue (int32).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("QueueIncarnation").Inputs(1).Stateful()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(QueueInput(c).status());
        c.set_output(0, DType::kInt64, PartialShape(Shape{}));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("A non-zero int64 naming this queue object: another one of its name (made afresh after a drop, on "
               "another node or process) has another.").Build()));
  return Status::OK();
}

namespace ops {
namespace {

Output MakeQueue(Graph& g, const std::string& op, const std::vector<DType>& types,
                 const QueueOptions& opts, int64_t min_after_dequeue, int64_t seed,
                 const std::string& name) {
  // Like Variable: the default shared name is the node's unique scoped name,
  // so two queues never share state by accident.
  const std::string base = name.empty() ? op : name;
  const std::string unique = g.ScopedName(base);
  const std::string prefix = g.ScopedName("");
  AttrMap a;
  a.Set("shared_name", opts.shared_name.empty() ? unique : opts.shared_name);
  a.Set("component_types", types);
  a.Set("shapes", EncodeQueueShapes(opts.shapes));
  a.Set("capacity", opts.capacity);
  if (op == "RandomShuffleQueue") {
    a.Set("min_after_dequeue", min_after_dequeue);
    a.Set("seed", seed);
  }
  return g.Add1(op, {}, std::move(a), unique.substr(prefix.size()));
}

// The component types of the queue behind `queue`, or an error recorded in g.
bool QueueTypes(Graph& g, Output queue, const char* what, std::vector<DType>* types) {
  if (!queue.valid()) return false;
  const Node& q = queue.op();
  auto t = q.attrs.Get<std::vector<DType>>("component_types");
  if (!IsQueueOp(q.op) || !t.ok()) {
    g.RecordError(InvalidArgument(std::string(what) + ": '" + q.name +
                                  "' is not a queue (FIFOQueue, RandomShuffleQueue, PaddingFIFOQueue)"));
    return false;
  }
  *types = *t;
  return true;
}

std::vector<Output> Dequeue(Graph& g, const std::string& op, Output queue, const std::vector<Output>& extra,
                            int64_t timeout_ms, const std::string& name) {
  std::vector<DType> types;
  if (!QueueTypes(g, queue, op.c_str(), &types)) return {};
  for (const Output& o : extra)
    if (!o.valid()) return {};
  AttrMap a;
  a.Set("component_types", types);
  a.Set("timeout_ms", timeout_ms);
  std::vector<Output> inputs{queue};
  inputs.insert(inputs.end(), extra.begin(), extra.end());
  const int id = g.AddNode(op, inputs, std::move(a), name);
  if (id < 0) return {};
  std::vector<Output> out;
  for (size_t i = 0; i < types.size(); ++i) out.emplace_back(&g, id, static_cast<int>(i));
  return out;
}

int Enqueue(Graph& g, const std::string& op, Output queue, const std::vector<Output>& components,
            int64_t timeout_ms, const std::string& name) {
  if (!queue.valid()) return -1;
  for (const Output& o : components)
    if (!o.valid()) return -1;
  std::vector<Output> inputs{queue};
  inputs.insert(inputs.end(), components.begin(), components.end());
  AttrMap a;
  a.Set("timeout_ms", timeout_ms);
  return g.AddNode(op, inputs, std::move(a), name);
}

}  // namespace

Output FIFOQueue(Graph& g, const std::vector<DType>& component_types, const QueueOptions& opts,
                 const std::string& name) {
  return MakeQueue(g, "FIFOQueue", component_types, opts, 0, 0, name);
}

Output RandomShuffleQueue(Graph& g, const std::vector<DType>& component_types, int64_t capacity,
                          int64_t min_after_dequeue, int64_t seed, QueueOptions opts,
                          const std::string& name) {
  opts.capacity = capacity;
  return MakeQueue(g, "RandomShuffleQueue", component_types, opts, min_after_dequeue, seed, name);
}

Output PaddingFIFOQueue(Graph& g, const std::vector<DType>& component_types, const QueueOptions& opts,
                        const std::string& name) {
  return MakeQueue(g, "PaddingFIFOQueue", component_types, opts, 0, 0, name);
}

Operation QueueEnqueue(Graph& g, Output queue, const std::vector<Output>& components, int64_t timeout_ms,
                       const std::string& name) {
  return Operation(&g, Enqueue(g, "QueueEnqueue", queue, components, timeout_ms, name));
}

Operation QueueEnqueueMany(Graph& g, Output queue, const std::vector<Output>& components, int64_t timeout_ms,
                           const std::string& name) {
  return Operation(&g, Enqueue(g, "QueueEnqueueMany", queue, components, timeout_ms, name));
}

std::vector<Output> QueueDequeue(Graph& g, Output queue, int64_t timeout_ms, const std::string& name) {
  return Dequeue(g, "QueueDequeue", queue, {}, timeout_ms, name);
}

std::vector<Output> QueueDequeueMany(Graph& g, Output queue, Output n, int64_t timeout_ms,
                                     const std::string& name) {
  return Dequeue(g, "QueueDequeueMany", queue, {n}, timeout_ms, name);
}

namespace {

// n travels as an int32 scalar, as in TensorFlow: one that does not fit is
// refused here, not cut down to a different count.
Output CountInput(Graph& g, const char* op, int64_t n, const std::string& name) {
  if (n > std::numeric_limits<int32_t>::max() || n < std::numeric_limits<int32_t>::min()) {
    g.RecordError(InvalidArgument(std::string(op) + " '" + name + "': n must be at most " +
                                  std::to_string(std::numeric_limits<int32_t>::max()) + " (an int32), got " +
                                  std::to_string(n)));
    return Output();
  }
  return Const(g, static_cast<int32_t>(n));
}

}  // namespace

std::vector<Output> QueueDequeueMany(Graph& g, Output queue, int64_t n, int64_t timeout_ms,
                                     const std::string& name) {
  if (!queue.valid()) return {};
  Output count = CountInput(g, "QueueDequeueMany", n, name);
  if (!count.valid()) return {};
  return QueueDequeueMany(g, queue, count, timeout_ms, name);
}

std::vector<Output> QueueDequeueUpTo(Graph& g, Output queue, Output n, int64_t timeout_ms,
                                     const std::string& name) {
  return Dequeue(g, "QueueDequeueUpTo", queue, {n}, timeout_ms, name);
}

std::vector<Output> QueueDequeueUpTo(Graph& g, Output queue, int64_t n, int64_t timeout_ms,
                                     const std::string& name) {
  if (!queue.valid()) return {};
  Output count = CountInput(g, "QueueDequeueUpTo", n, name);
  if (!count.valid()) return {};
  return QueueDequeueUpTo(g, queue, count, timeout_ms, name);
}

std::vector<Output> QueueDequeueAvailable(Graph& g, Output queue, int64_t n, int64_t timeout_ms,
                                          const std::string& name) {
  std::vector<Output> out = QueueDequeueUpTo(g, queue, n, timeout_ms, name);
  if (!out.empty()) g.mutable_node(out[0].node).attrs.Set("wait_for_n", false);
  return out;
}

Operation QueueClose(Graph& g, Output queue, bool cancel_pending_enqueues, const std::string& name) {
  if (!queue.valid()) return Operation(&g, -1);
  AttrMap a;
  a.Set("cancel_pending_enqueues", cancel_pending_enqueues);
  return Operation(&g, g.AddNode("QueueClose", {queue}, std::move(a), name));
}

Output QueueSize(Graph& g, Output queue, const std::string& name) {
  if (!queue.valid()) return Output();
  return g.Add1("QueueSize", {queue}, {}, name);
}

Output QueueIncarnation(Graph& g, Output queue, const std::string& name) {
  if (!queue.valid()) return Output();
  return g.Add1("QueueIncarnation", {queue}, {}, name);
}

}  // namespace ops
}  // namespace sf

// Work sharing ops: ChunkQueue (a handle), ChunkQueueTake, ChunkQueueReport,
// ChunkQueueRelease (kernels/cpu/chunk_queue_kernels.cc, through the
// ChunkQueueService), CriteoChunkReader (one chunk read whole), and the
// builders of include/shardflow/chunk_queue_ops.h.
#include <algorithm>
#include <limits>
#include <set>

#include "graph/op_registry.h"
#include "kernels/chunk_leases.h"
#include "kernels/criteo_chunk.h"
#include "kernels/criteo_format.h"
#include "kernels/criteo_reader.h"
#include "shardflow/chunk_queue_ops.h"
#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"

namespace sf {
namespace {

// Input i must be an int64 of rank at most max_rank.
Status Int64Input(InferenceContext& c, int i, const char* what, int max_rank) {
  if (c.input_dtype(i) != DType::kInt64)
    return c.Error(std::string(what) + " must be int64, got " + DTypeName(c.input_dtype(i)));
  const PartialShape& s = c.input_shape(i);
  if (s.rank_known() && s.rank() > max_rank)
    return c.Error(std::string(what) + " must have rank at most " + std::to_string(max_rank) + ", got " +
                   s.ToString());
  return Status::OK();
}

Status HandleInput(InferenceContext& c) {
  if (c.input_dtype(0) != DType::kResource)
    return c.Error(std::string("input 0 must be a chunk queue handle (resource), got ") + DTypeName(c.input_dtype(0)));
  const Node& p = c.graph().node(c.node().inputs[0].node);
  if (p.op != "ChunkQueue" && p.op != "Placeholder")
    return c.Error("input 0 is '" + p.name + "' (" + p.op + "), not a ChunkQueue");
  return Int64Input(c, 1, "worker", 0);
}

Result<ChunkLeaseOptions> LeaseOptionsFromAttrs(const AttrMap& a) {
  ChunkLeaseOptions o;
  SF_ASSIGN_OR_RETURN(o.num_chunks, a.Get<int64_t>("num_chunks"));
  SF_ASSIGN_OR_RETURN(o.num_epochs, a.GetOr<int64_t>("num_epochs", o.num_epochs));
  SF_ASSIGN_OR_RETURN(o.lease_ms, a.GetOr<int64_t>("lease_ms", o.lease_ms));
  SF_RETURN_IF_ERROR(ValidateChunkLeaseOptions(o));
  return o;
}

}  // namespace

Status RegisterChunkQueueOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ChunkQueue")
      .RequiredAttr<std::string>("shared_name").State(StateAttr::kName).RequiredAttr<int64_t>("num_chunks")
      .Attr("num_epochs", int64_t{1}).Attr("lease_ms", int64_t{30000})
      .Inputs(0).Stateful().Repeatable().NotDifferentiable()
      .Shape([](InferenceContext& c) -> Status {
        SF_ASSIGN_OR_RETURN(std::string name, c.Attr<std::string>("shared_name"));
        if (name.empty()) return c.Error("ChunkQueue needs a non-empty shared_name");
        if (auto o = LeaseOptionsFromAttrs(c.attrs()); !o.ok()) return c.Error("chunk queue '" + name + "': " + o.status().message());
        c.set_output(0, DType::kResource, PartialShape(Shape{}));
        return Status::OK();
      })
      .Summary("A chunk queue actor handing num_chunks chunks (num_epochs passes) out to workers with leases of "
               "lease_ms (kernels/chunk_leases.h).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ChunkQueueTake")
      .InputNames({"queue", "worker", "reader"}).Inputs(2, 3).Stateful().NotDifferentiable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(HandleInput(c));
        if (c.num_inputs() > 2) SF_RETURN_IF_ERROR(Int64Input(c, 2, "reader", 0));
        for (int i = 0; i < 3; ++i) c.set_output(i, DType::kInt64, PartialShape(Shape{}));
        return Status::OK();
      })
      .Summary("Hands worker (int64) a chunk: its ticket, chunk index and the lines to skip (trained already); "
               "waits while the chunks left are held by others; OutOfRange once every chunk is done. reader "
               "(optional int64): what the worker reads into (QueueIncarnation of its row queue); another one than "
               "before takes back the worker's chunks first (their rows went with the old one).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ChunkQueueReport")
      .InputNames({"queue", "worker", "tickets", "pos"}).Attr("read", false)
      .Inputs(4).Stateful().Repeatable().NotDifferentiable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(HandleInput(c));
        SF_RETURN_IF_ERROR(Int64Input(c, 2, "tickets", 1));
        SF_RETURN_IF_ERROR(Int64Input(c, 3, "pos", 1));
        return c.AttrOr<bool>("read", false).status();
      })
      .Summary("Reports worker's rows trained (tickets and line positions, int64 [n] or scalars), or with attr read "
               "the chunks it read to their end at pos; fails when the worker lost a chunk's lease. Repeatable: "
               "the worker's repeat of the report that finished a chunk (a step run again) is a no-op.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ChunkQueueRelease")
      .InputNames({"queue", "worker"}).Inputs(2).Stateful().NotDifferentiable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(HandleInput(c));
        c.set_output(0, DType::kInt64, PartialShape(Shape{}));
        return Status::OK();
      })
      .Summary("Gives worker's chunks back to the chunk queue (a worker leaving); outputs how many it held.")
      .Build()));
  return reg.Register(OpBuilder("CriteoChunkReader")
      .InputNames({"ticket", "chunk", "skip"}).RequiredAttr<std::string>("files").Path(PathAttr::kDataFiles)
      .RequiredAttr<std::vector<int64_t>>("chunks").Attr("on_malformed", "skip")
      .Attr("max_line_bytes", CriteoReaderOptions{}.max_line_bytes)
      .Inputs(3).Stateful().NotDifferentiable()
      .Shape([](InferenceContext& c) -> Status {
        for (int i = 0; i < 3; ++i) SF_RETURN_IF_ERROR(Int64Input(c, i, i == 0 ? "ticket" : i == 1 ? "chunk" : "skip", 0));
        SF_ASSIGN_OR_RETURN(std::string files, c.Attr<std::string>("files"));
        auto split = SplitCriteoFiles(files);
        if (!split.ok()) return c.Error(split.status().message());
        SF_ASSIGN_OR_RETURN(std::vector<int64_t> plan, c.Attr<std::vector<int64_t>>("chunks"));
        if (auto d = DecodeChunkPlan(*split, plan); !d.ok()) return c.Error(d.status().message());
        if (auto o = CriteoReaderOptionsFromAttrs(c.attrs()); !o.ok()) return c.Error(o.status().message());
        c.set_output(0, DType::kFloat32, PartialShape(Shape{-1}));
        c.set_output(1, DType::kFloat32, PartialShape(Shape{-1, kCriteoDense}));
        c.set_output(2, DType::kInt64, PartialShape(Shape{-1, kCriteoCategorical}));
        c.set_output(3, DType::kInt64, PartialShape(Shape{-1}));  // ticket per row
        c.set_output(4, DType::kInt64, PartialShape(Shape{-1}));  // line per row
        c.set_output(5, DType::kInt64, PartialShape(Shape{}));    // line of the last row
        c.set_output(6, DType::kInt64, PartialShape(Shape{}));    // malformed lines skipped
        return Status::OK();
      })
      .Summary("Reads chunk `chunk` (attr chunks: file, begin, end triples over attr files) after its first "
               "`skip` lines: label, dense, categorical as CriteoReader, each row's ticket and line, the last "
               "row's line and the malformed lines skipped; errors name the file.")
      .Build());
}

namespace ops {

Result<CriteoChunkPlan> PlanCriteoChunks(const std::vector<std::string>& files, int64_t chunk_bytes) {
  if (files.empty()) return InvalidArgument("no files to plan chunks of");
  for (const std::string& f : files)
    if (f.empty() || f.find('\n') != std::string::npos)
      return InvalidArgument("a file name is empty or holds a newline: '" + f + "'");
  SF_ASSIGN_OR_RETURN(std::vector<LineChunk> chunks, PlanLineChunks(files, chunk_bytes));
  return CriteoChunkPlan{files, EncodeChunkPlan(files, chunks)};
}

Output ChunkQueue(Graph& g, int64_t num_chunks, const ChunkQueueOptions& options, const std::string& shared_name) {
  AttrMap a;
  a.Set("shared_name", shared_name);
  a.Set("num_chunks", num_chunks);
  a.Set("num_epochs", options.num_epochs);
  a.Set("lease_ms", options.lease_ms);
  const int id = g.AddNode("ChunkQueue", {}, std::move(a), shared_name);
  return id < 0 ? Output() : Output(&g, id, 0);
}

SharedCriteoInput SharedCriteoBatchQueue(Graph& g, Output chunk_queue, const CriteoChunkPlan& plan,
                                         const CriteoReaderOptions& options, int64_t worker, int64_t batch_size,
                                         int64_t capacity, const std::string& name) {
  const std::string where = "SharedCriteoBatchQueue '" + name + "': ";
  if (!chunk_queue.valid()) {
    g.RecordError(InvalidArgument(where + "no chunk queue"));
    return {};
  }
  if (batch_size < 1 || batch_size > std::numeric_limits<int32_t>::max()) {
    g.RecordError(InvalidArgument(where + "batch_size must be in [1, 2^31), got " + std::to_string(batch_size)));
    return {};
  }
  std::string joined;
  for (const std::string& f : plan.files) joined += (joined.empty() ? "" : "\n") + f;
  if (capacity <= 0) capacity = 4 * batch_size;
  SharedCriteoInput in;
  Output ticket, chunk, skip, handle = chunk_queue;
  const std::string queue_device = g.node(chunk_queue.node).device;
  auto on_queue = [&](auto build) {
    auto scope = g.DeviceScope(queue_device);
    return build();
  };
  QueueOptions qo;
  qo.shapes = {PartialShape(Shape{}), PartialShape(Shape{kCriteoDense}), PartialShape(Shape{kCriteoCategorical}),
               PartialShape(Shape{}), PartialShape(Shape{})};
  qo.capacity = capacity;
  // The worker's own: graphs of workers on one task name their nodes alike,
  // and a row must be trained by the worker holding its chunk.
  qo.shared_name = name + "/queue/worker_" + std::to_string(worker);
  Output rows = FIFOQueue(g, {DType::kFloat32, DType::kFloat32, DType::kInt64, DType::kInt64, DType::kInt64}, qo,
                          name + "/queue");
  // Which row queue its chunks are read into: a queue made afresh (its
  // task moved, its node died) lost the rows of the chunks the worker held,
  // which the chunk queue then hands out again at once.
  const Output reader = QueueIncarnation(g, rows, name + "/reader_queue");
  const Output me = on_queue([&] { return ops::Const(g, Tensor::Scalar<int64_t>(worker), name + "/worker"); });
  const int take = on_queue([&] { return g.AddNode("ChunkQueueTake", {handle, me, reader}, {}, name + "/take"); });
  if (take < 0) return {};
  AttrMap ra;
  ra.Set("files", joined);
  ra.Set("chunks", plan.chunks);
  ra.Set("on_malformed", std::string(options.skip_malformed ? "skip" : "fail"));
  ra.Set("max_line_bytes", options.max_line_bytes);
  const int read = g.AddNode("CriteoChunkReader", {Output(&g, take, 0), Output(&g, take, 1), Output(&g, take, 2)},
                             std::move(ra), name + "/reader");
  if (read < 0) return {};
  std::vector<Output> cols;
  for (int i = 0; i < 5; ++i) cols.push_back(Output(&g, read, i));
  Operation enqueue = QueueEnqueueMany(g, rows, cols, 0, name + "/enqueue");
  AttrMap done;
  done.Set("read", true);
  in.enqueue = Operation(&g, on_queue([&] {
    return g.AddNode("ChunkQueueReport", {handle, me, Output(&g, take, 0), Output(&g, read, 5)}, std::move(done),
                     name + "/read");
  }));
  if (!enqueue.valid() || !in.enqueue.valid() || !g.AddControlInput(in.enqueue.node, enqueue.node).ok()) return {};
  in.close = QueueClose(g, rows, false, name + "/close");
  in.cancel = QueueClose(g, rows, true, name + "/cancel");
  // What is there, up to a batch: a worker's rows may stop short of a whole
  // batch while its runner waits for chunks other workers hold, which they
  // finish only as this worker trains (a full-batch wait would deadlock).
  std::vector<Output> batch = QueueDequeueAvailable(g, rows, batch_size, 0, name + "/dequeue");
  if (batch.size() != 5 || !in.close.valid() || !in.cancel.valid()) return {};
  in.label = batch[0];
  in.dense = batch[1];
  in.categorical = batch[2];
  in.ticket = batch[3];
  in.pos = batch[4];
  on_queue([&] {
    in.trained_ticket = Placeholder(g, DType::kInt64, PartialShape(Shape{-1}), name + "/trained_ticket");
    in.trained_pos = Placeholder(g, DType::kInt64, PartialShape(Shape{-1}), name + "/trained_pos");
    in.trained = Operation(&g, g.AddNode("ChunkQueueReport", {handle, me, in.trained_ticket, in.trained_pos}, {},
                                         name + "/trained"));
    in.release = Operation(&g, g.AddNode("ChunkQueueRelease", {handle, me}, {}, name + "/release"));
    return 0;
  });
  if (!in.trained.valid() || !in.release.valid()) return {};
  return in;
}

Status ReportTrainedBefore(Graph& g, const SharedCriteoInput& in, Operation train) {
  if (!in.trained.valid() || in.trained.graph != &g) return InvalidArgument("ReportTrainedBefore: no shared input of this graph");
  if (!train.valid() || train.graph != &g) return InvalidArgument("ReportTrainedBefore: no training op of this graph");
  const std::vector<int>& after = g.node(in.trained.node).control_inputs;
  if (std::find(after.begin(), after.end(), train.node) != after.end())
    return InvalidArgument("ReportTrainedBefore: '" + in.trained.name() + "' already runs after '" + train.name() +
                           "' (the report must come first, so a refused one changes nothing)");
  // Groups (NoOps gathering control inputs) are looked through: a control
  // edge into a group would not hold back the updates it gathers.
  std::vector<int> stack{train.node};
  std::set<int> seen;
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (!seen.insert(id).second || id == in.trained.node) continue;
    const Node& n = g.node(id);
    if (n.op == "NoOp" && n.inputs.empty() && !n.control_inputs.empty()) {
      stack.insert(stack.end(), n.control_inputs.begin(), n.control_inputs.end());
      continue;
    }
    if (std::find(n.control_inputs.begin(), n.control_inputs.end(), in.trained.node) == n.control_inputs.end())
      SF_RETURN_IF_ERROR(g.AddControlInput(id, in.trained.node));
  }
  return Status::OK();
}

bool IsLostChunk(const Status& s) {
  return s.code() == Code::kFailedPrecondition && s.message().find(kLostChunkText) != std::string::npos;
}

}  // namespace ops
}  // namespace sf

// The decoder of net/wire.h's messages from their Cap'n Proto forms, every
// count, size, dtype and shape checked before anything is allocated: an
// internal header of net/wire.cc. Not a public header.
#pragma once

#include "net/wire_encoder.h"

namespace sf {
namespace net {
namespace wire_detail {

// ---------------------------------------------------------------- decoding

// Reads the Envelope's union into a Body, checking every count, size, dtype
// and shape against the limits before allocating for it.
struct Decoder {
  const WireLimits& lim;
  // The byte ranges of the blobs copied so far. Cap'n Proto lets two
  // pointers name the same bytes, and a peer's traversal limit counts an
  // aliased blob once per pointer: without this check a 1 MiB message could
  // make the decoder copy gigabytes. No encoder of ours writes aliases.
  mutable std::map<const char*, const char*> blobs;
  // Set by the owner of the bytes when they are about to go (a call decoded
  // off the I/O thread whose connection dropped): long lists stop early.
  const std::atomic<bool>* cancel = nullptr;

  // Aborted when the owner of the bytes asked to stop; checked every 4096
  // elements of a list, so stopping waits for little.
  Status CheckCancel(size_t i) const {
    if (cancel && (i & 4095) == 0 && cancel->load(std::memory_order_relaxed))
      return Aborted("decoding stopped: the message's connection went away");
    return Status::OK();
  }

  static std::string Field(const std::string& list, size_t i) { return list + "[" + std::to_string(i) + "]"; }

  // OK when [begin, begin + size) shares no byte with a blob already
  // copied, and records it; DataLoss naming field otherwise.
  Status Claim(const void* begin, size_t size, const std::string& field) const {
    if (size == 0) return Status::OK();
    const char* b = static_cast<const char*>(begin);
    const char* e = b + size;
    auto next = blobs.lower_bound(b);
    if ((next != blobs.end() && next->first < e) || (next != blobs.begin() && std::prev(next)->second > b))
      return DataLoss(field + " shares its bytes with another field of the message (aliased pointers, which no "
                      "shardflow encoder writes)");
    blobs.emplace_hint(next, b, e);
    return Status::OK();
  }

  Status Text(capnp::Text::Reader r, const std::string& field, std::string* out) const {
    if (r.size() > lim.max_text_bytes)
      return InvalidArgument(field + " has " + std::to_string(r.size()) + " bytes; the limit is " +
                             std::to_string(lim.max_text_bytes));
    SF_RETURN_IF_ERROR(Claim(r.begin(), r.size(), field));
    out->assign(r.begin(), r.size());
    return Status::OK();
  }
  Status Bytes(capnp::Data::Reader r, const std::string& field, std::string* out, bool bounded = true) const {
    if (bounded && r.size() > lim.max_text_bytes)
      return InvalidArgument(field + " has " + std::to_string(r.size()) + " bytes; the limit is " +
                             std::to_string(lim.max_text_bytes));
    SF_RETURN_IF_ERROR(Claim(r.begin(), r.size(), field));
    out->assign(reinterpret_cast<const char*>(r.begin()), r.size());
    return Status::OK();
  }
  Status ListSize(uint64_t n, const std::string& field) const {
    if (n > lim.max_list_elements)
      return InvalidArgument(field + " has " + std::to_string(n) + " elements; the limit is " +
                             std::to_string(lim.max_list_elements));
    return Status::OK();
  }

  // A node's timeline: at most kMaxTraceEvents events, each naming one of
  // the listed threads, with durations that are not negative.
  Status Trace(w::PartitionTrace::Reader r, RunPartitionDone* m) const {
    auto events = r.getEvents();
    auto threads = r.getThreads();
    if (events.size() > static_cast<uint64_t>(kMaxTraceEvents))
      return InvalidArgument("RunPartitionDone.trace has " + std::to_string(events.size()) +
                             " events; the limit is " + std::to_string(kMaxTraceEvents));
    SF_RETURN_IF_ERROR(ListSize(threads.size(), "RunPartitionDone.trace.threads"));
    m->trace.threads.resize(threads.size());
    for (size_t i = 0; i < threads.size(); ++i)
      SF_RETURN_IF_ERROR(Text(threads[i], "RunPartitionDone.trace.threads", &m->trace.threads[i]));
    m->trace.events.resize(events.size());
    for (size_t i = 0; i < events.size(); ++i) {
      auto e = events[i];
      TraceEvent& ev = m->trace.events[i];
      SF_RETURN_IF_ERROR(Text(e.getName(), "RunPartitionDone.trace.events.name", &ev.name));
      SF_RETURN_IF_ERROR(Text(e.getOp(), "RunPartitionDone.trace.events.op", &ev.op));
      SF_RETURN_IF_ERROR(Text(e.getCategory(), "RunPartitionDone.trace.events.category", &ev.category));
      ev.thread = e.getThread();
      ev.start_ns = e.getStartNs();
      ev.dur_ns = e.getDurNs();
      if (ev.thread >= threads.size() || ev.dur_ns < 0)
        return InvalidArgument(Field("RunPartitionDone.trace.events", i) + " names thread " +
                               std::to_string(ev.thread) + " of " + std::to_string(threads.size()) +
                               " or has a negative duration");
    }
    m->trace.dropped = r.getDropped();
    m->trace_elapsed_ns = r.getElapsedNs();
    return Status::OK();
  }

  // A tensor's dtype and shape, checked (rank, dims, element count), and its
  // byte count; the data is not looked at.
  Status TensorMeta(proto::Tensor::Reader r, const std::string& field, DType* dtype_out, Shape* shape_out,
                    uint64_t* bytes) const {
    const auto raw = static_cast<uint16_t>(r.getDtype());
    if (raw > static_cast<uint16_t>(DType::kResource))
      return InvalidArgument(field + ": unknown dtype enumerant " + std::to_string(raw));
    const DType dtype = static_cast<DType>(raw);
    auto dims = r.getShape();
    if (dims.size() > lim.max_rank)
      return InvalidArgument(field + ": tensor rank " + std::to_string(dims.size()) + " exceeds the limit " +
                             std::to_string(lim.max_rank));
    *dtype_out = dtype;
    *bytes = 0;
    if (dtype == DType::kInvalid) {
      if (dims.size() != 0) return InvalidArgument(field + ": a tensor of dtype invalid carries a shape or data");
      return Status::OK();
    }
    Shape& shape = *shape_out;
    shape.clear();
    shape.reserve(dims.size());
    uint64_t n = 1;
    for (int64_t d : dims) {
      if (d < 0) return InvalidArgument(field + ": tensor dimension " + std::to_string(d) + " is negative");
      shape.push_back(d);
      if (d > 0 && n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / d)
        return InvalidArgument(field + ": the element count of shape " + ShapeString(shape) + "... overflows int64");
      n *= static_cast<uint64_t>(d);
    }
    const uint64_t elem = DTypeSize(dtype);
    if (n > std::numeric_limits<uint64_t>::max() / elem)
      return InvalidArgument(field + ": tensor " + DTypeName(dtype) + ShapeString(shape) + " has " + std::to_string(n) +
                             " elements of " + std::to_string(elem) + " bytes, more than any data bytes can hold");
    *bytes = n * elem;
    return Status::OK();
  }

  Result<sf::Tensor> Tensor(proto::Tensor::Reader r, const std::string& field) const {
    DType dtype;
    Shape shape;
    uint64_t bytes = 0;
    SF_RETURN_IF_ERROR(TensorMeta(r, field, &dtype, &shape, &bytes));
    auto data = r.getData();
    if (dtype == DType::kInvalid) {
      if (data.size() != 0) return InvalidArgument(field + ": a tensor of dtype invalid carries a shape or data");
      return sf::Tensor();
    }
    const uint64_t elem = DTypeSize(dtype);
    const uint64_t n = bytes / elem;
    if (bytes != data.size())
      return InvalidArgument(field + ": tensor " + DTypeName(dtype) + ShapeString(shape) + " has " +
                             std::to_string(n) + " elements of " + std::to_string(elem) + " bytes but " +
                             std::to_string(data.size()) + " data bytes");
    SF_RETURN_IF_ERROR(Claim(data.begin(), data.size(), field));
    sf::Tensor t(dtype, std::move(shape));
    if (data.size() > 0) std::memcpy(t.raw_data(), data.begin(), data.size());
    if (dtype == DType::kBool) {
      // Any nonzero byte is true; normalise so comparisons of bools stay exact.
      auto* p = static_cast<uint8_t*>(t.raw_data());
      for (uint64_t i = 0; i < n; ++i) p[i] = p[i] != 0;
    }
    return t;
  }

  Result<std::vector<sf::Tensor>> Tensors(capnp::List<proto::Tensor>::Reader list, const std::string& field) const {
    SF_RETURN_IF_ERROR(ListSize(list.size(), field));
    std::vector<sf::Tensor> out;
    out.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      SF_ASSIGN_OR_RETURN(sf::Tensor t, Tensor(list[i], Field(field, i)));
      out.push_back(std::move(t));
    }
    return out;
  }

  Status StatusFrom(w::Status::Reader r, const std::string& field, sf::Status* out) const {
    if (r.getCode() > kMaxCode)
      return InvalidArgument(field + ": unknown status code " + std::to_string(r.getCode()));
    std::string msg;
    SF_RETURN_IF_ERROR(Text(r.getMessage(), field + ".message", &msg));
    const Code code = static_cast<Code>(r.getCode());
    *out = code == Code::kOk ? sf::Status::OK() : sf::Status(code, std::move(msg));
    return Status::OK();
  }

  Result<std::vector<OutputRef>> OutputRefs(capnp::List<w::OutputRef>::Reader list, const std::string& field) const {
    SF_RETURN_IF_ERROR(ListSize(list.size(), field));
    std::vector<OutputRef> out(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      SF_RETURN_IF_ERROR(CheckCancel(i));
      auto r = list[i];
      SF_RETURN_IF_ERROR(Text(r.getNode(), Field(field, i) + ".node", &out[i].node));
      out[i].index = r.getIndex();
    }
    return out;
  }

  Result<std::vector<Member>> Members(capnp::List<w::Member>::Reader list, const std::string& field) const {
    SF_RETURN_IF_ERROR(ListSize(list.size(), field));
    std::vector<Member> out(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      SF_RETURN_IF_ERROR(CheckCancel(i));
      auto r = list[i];
      SF_RETURN_IF_ERROR(Text(r.getName(), Field(field, i) + ".name", &out[i].name));
      SF_RETURN_IF_ERROR(Text(r.getAddress(), Field(field, i) + ".address", &out[i].address));
      out[i].incarnation = r.getIncarnation();
    }
    return out;
  }

  Status Read(w::Heartbeat::Reader, Heartbeat*) const { return Status::OK(); }
  Status Read(w::StatusReply::Reader r, StatusReply* m) const {
    return StatusFrom(r.getStatus(), "StatusReply.status", &m->status);
  }
  Status Read(w::ListMembers::Reader, ListMembers*) const { return Status::OK(); }
  Status Read(w::Membership::Reader r, Membership* m) const {
    SF_ASSIGN_OR_RETURN(m->members, Members(r.getMembers(), "Membership.members"));
    SF_ASSIGN_OR_RETURN(m->leaving, Members(r.getLeaving(), "Membership.leaving"));
    SF_RETURN_IF_ERROR(Names(r.getMapHolder(), "Membership.map_holder", &m->map_holder));
    SF_RETURN_IF_ERROR(Names(r.getMapFrom(), "Membership.map_from", &m->map_from));
    {
      auto lost = r.getMapLostAfter();
      SF_RETURN_IF_ERROR(ListSize(lost.size(), "Membership.map_lost_after"));
      m->map_lost_after.resize(lost.size());
      for (size_t i = 0; i < lost.size(); ++i) m->map_lost_after[i] = lost[i];
    }
    m->map_epoch = r.getMapEpoch();
    m->map_slots = r.getMapSlots();
    if (m->map_from.size() != m->map_holder.size() || m->map_lost_after.size() != m->map_holder.size())
      return InvalidArgument("Membership: " + std::to_string(m->map_holder.size()) + " map holders but " +
                             std::to_string(m->map_from.size()) + " map_from and " +
                             std::to_string(m->map_lost_after.size()) + " map_lost_after entries");
    return Status::OK();
  }
  Status Read(w::RegisterPartition::Reader r, RegisterPartition* m) const {
    // A registration's lists are bounded before any of them is read
    // (RegisterPartition's bounds, net/messages.h).
    auto feeds = r.getFeeds();
    auto fetches = r.getFetches();
    auto tasks = r.getTasks();
    auto targets = r.getTargets();
    if (tasks.size() > kMaxRegisteredTasks)
      return InvalidArgument("RegisterPartition.tasks has " + std::to_string(tasks.size()) + " tasks; the limit is " +
                             std::to_string(kMaxRegisteredTasks));
    const uint64_t names = uint64_t{feeds.size()} + fetches.size() + targets.size();
    if (names > kMaxRegisteredNodes)
      return InvalidArgument("RegisterPartition names " + std::to_string(names) +
                             " feeds, fetches and targets; the limit is " + std::to_string(kMaxRegisteredNodes));
    m->session_id = r.getSessionId();
    m->handle = r.getHandle();
    SF_RETURN_IF_ERROR(Text(r.getDevice(), "RegisterPartition.device", &m->device));
    SF_RETURN_IF_ERROR(Bytes(r.getGraphDef(), "RegisterPartition.graph_def", &m->graph_def, false));
    SF_ASSIGN_OR_RETURN(m->feeds, OutputRefs(feeds, "RegisterPartition.feeds"));
    SF_ASSIGN_OR_RETURN(m->fetches, OutputRefs(fetches, "RegisterPartition.fetches"));
    SF_ASSIGN_OR_RETURN(m->tasks, Members(tasks, "RegisterPartition.tasks"));
    SF_RETURN_IF_ERROR(Names(targets, "RegisterPartition.targets", &m->targets));
    m->epoch = r.getEpoch();
    return Status::OK();
  }
  Status Read(w::RunPartition::Reader r, RunPartition* m) const {
    m->session_id = r.getSessionId();
    m->handle = r.getHandle();
    m->step_id = r.getStepId();
    m->trace_max_events = r.getTraceMaxEvents();
    m->progress_ms = r.getProgressMs();
    if (m->progress_ms < 0)
      return InvalidArgument("RunPartition.progress_ms is negative (" + std::to_string(m->progress_ms) + ")");
    SF_ASSIGN_OR_RETURN(m->feeds, Tensors(r.getFeeds(), "RunPartition.feeds"));
    return Status::OK();
  }
  Status Read(w::RunPartitionDone::Reader r, RunPartitionDone* m) const {
    m->step_id = r.getStepId();
    SF_RETURN_IF_ERROR(StatusFrom(r.getStatus(), "RunPartitionDone.status", &m->status));
    SF_ASSIGN_OR_RETURN(m->fetches, Tensors(r.getFetches(), "RunPartitionDone.fetches"));
    if (r.hasTrace()) SF_RETURN_IF_ERROR(Trace(r.getTrace(), m));
    return Status::OK();
  }
  // A SendTensor's fields but its value.
  Status SendTensorKey(w::SendTensor::Reader r, SendTensor* m) const {
    m->step_id = r.getStepId();
    SF_RETURN_IF_ERROR(Text(r.getEdge(), "SendTensor.edge", &m->edge));
    SF_RETURN_IF_ERROR(Text(r.getFrame(), "SendTensor.frame", &m->frame));
    m->iteration = r.getIteration();
    m->is_dead = r.getIsDead();
    m->session_id = r.getSessionId();
    return Status::OK();
  }
  Status Read(w::SendTensor::Reader r, SendTensor* m) const {
    SF_RETURN_IF_ERROR(SendTensorKey(r, m));
    SF_ASSIGN_OR_RETURN(m->value, Tensor(r.getValue(), "SendTensor.value"));
    return Status::OK();
  }
  // A streamed SendTensor's header: its value names dtype and shape, no data.
  Status ReadStreamedHeader(w::SendTensor::Reader r, SendTensor* m, DType* dtype, Shape* shape, uint64_t* bytes) const {
    SF_RETURN_IF_ERROR(SendTensorKey(r, m));
    auto v = r.getValue();
    if (v.getData().size() != 0) return InvalidArgument("a streamed SendTensor's header carries data");
    SF_RETURN_IF_ERROR(TensorMeta(v, "SendTensor.value", dtype, shape, bytes));
    if (*dtype == DType::kInvalid || *dtype == DType::kResource)
      return InvalidArgument(std::string("a streamed SendTensor of dtype ") + DTypeName(*dtype));
    return Status::OK();
  }
  Status Read(w::AbortStep::Reader r, AbortStep* m) const {
    m->step_id = r.getStepId();
    m->session_id = r.getSessionId();
    return StatusFrom(r.getStatus(), "AbortStep.status", &m->status);
  }
  Status Read(w::CleanupStep::Reader r, CleanupStep* m) const {
    *m = CleanupStep{r.getStepId(), r.getSessionId()};
    return Status::OK();
  }
  Status Read(w::StepProgress::Reader r, StepProgress* m) const {
    *m = StepProgress{r.getSessionId(), r.getStepId(), r.getOps()};
    return Status::OK();
  }
  Status Read(w::CloseSession::Reader r, CloseSession* m) const {
    *m = CloseSession{r.getSessionId()};
    return Status::OK();
  }
  Status Read(w::Echo::Reader r, Echo* m) const {
    SF_ASSIGN_OR_RETURN(m->payload, Tensor(r.getPayload(), "Echo.payload"));
    return Status::OK();
  }
  // The fields a chunk and an announcement share, read into m and checked.
  template <class Reader, class M>
  Status GroupFields(Reader r, const char* kind, M* m) const {
    SF_RETURN_IF_ERROR(Text(r.getGroupKey(), std::string(kind) + ".group_key", &m->group_key));
    SF_RETURN_IF_ERROR(Text(r.getAddress(), std::string(kind) + ".address", &m->address));
    m->group_size = r.getGroupSize();
    m->from_rank = r.getFromRank();
    m->epoch = r.getEpoch();
    const std::string where = std::string(kind) + " of group '" + m->group_key + "'";
    if (m->group_size < 1 || m->group_size > 4096)
      return InvalidArgument(where + ": group_size " + std::to_string(m->group_size) + " is not in [1, 4096]");
    if (m->from_rank < 0 || m->from_rank >= m->group_size)
      return InvalidArgument(where + ": from_rank " + std::to_string(m->from_rank) + " is not in [0, " +
                             std::to_string(m->group_size) + ")");
    if (m->epoch < 0) return InvalidArgument(where + ": epoch " + std::to_string(m->epoch) + " is negative");
    return Status::OK();
  }
  Status Read(w::CollectiveAnnounce::Reader r, CollectiveAnnounce* m) const {
    return GroupFields(r, "CollectiveAnnounce", m);
  }
  Status Read(w::CollectiveChunk::Reader r, CollectiveChunk* out) const {
    CollectiveChunk& m = *out;
    SF_RETURN_IF_ERROR(GroupFields(r, "CollectiveChunk", &m));
    m.generation = r.getGeneration();
    m.step = r.getStep();
    m.total = r.getTotal();
    m.offset = r.getOffset();
    const std::string where = "CollectiveChunk of group '" + m.group_key + "'";
    if (m.step < 0 || m.step >= 2 * (m.group_size - 1))
      return InvalidArgument(where + ": step " + std::to_string(m.step) + " is not in [0, " +
                             std::to_string(2 * (m.group_size - 1)) + ")");
    if (m.generation < 0) return InvalidArgument(where + ": generation " + std::to_string(m.generation) + " is negative");
    if (m.total < 0) return InvalidArgument(where + ": total " + std::to_string(m.total) + " is negative");
    if (m.offset < 0 || m.offset > m.total)
      return InvalidArgument(where + ": offset " + std::to_string(m.offset) + " is not in [0, total = " +
                             std::to_string(m.total) + "]");
    SF_RETURN_IF_ERROR(StatusFrom(r.getStatus(), "CollectiveChunk.status", &m.status));
    SF_ASSIGN_OR_RETURN(m.chunk, Tensor(r.getChunk(), "CollectiveChunk.chunk"));
    if (m.chunk.valid() && (m.chunk.rank() != 1 || m.chunk.num_elements() > m.total - m.offset))
      return InvalidArgument(where + ": chunk " + ShapeString(m.chunk.shape()) + " is not 1-D or holds more than total = " +
                             std::to_string(m.total) + " elements from offset " + std::to_string(m.offset));
    return Status::OK();
  }
  Status Read(w::ReadVariables::Reader r, ReadVariables* m) const {
    return Names(r.getNames(), "ReadVariables.names", &m->names);
  }
  Status Read(w::VariableValues::Reader r, VariableValues* m) const {
    return NamedTensors(r, "VariableValues", &m->names, &m->values);
  }
  Status Read(w::AssignVariables::Reader r, AssignVariables* m) const {
    return NamedTensors(r, "AssignVariables", &m->names, &m->values);
  }
  // Names and one value per name: a struct of names and values whose lists
  // differ in length is refused before either is read.
  template <class R>
  Status NamedTensors(R r, const std::string& what, std::vector<std::string>* names,
                      std::vector<sf::Tensor>* values) const {
    auto n = r.getNames();  // each read is charged to the traversal limit: read once
    auto v = r.getValues();
    if (n.size() != v.size())
      return InvalidArgument(what + ": " + std::to_string(n.size()) + " names but " + std::to_string(v.size()) +
                             " values");
    SF_RETURN_IF_ERROR(Names(n, (what + ".names").c_str(), names));
    SF_ASSIGN_OR_RETURN(*values, Tensors(v, what + ".values"));
    return Status::OK();
  }

  // A list of names, each checked as Text.
  template <class R>
  Status Names(R r, const char* field, std::vector<std::string>* out) const {
    SF_RETURN_IF_ERROR(ListSize(r.size(), field));
    out->resize(r.size());
    for (size_t i = 0; i < out->size(); ++i) {
      SF_RETURN_IF_ERROR(CheckCancel(i));
      SF_RETURN_IF_ERROR(Text(r[i], Field(field, i), &(*out)[i]));
    }
    return Status::OK();
  }
  template <class R>
  Status Tokens(R r, const char* field, std::vector<uint64_t>* out) const {
    SF_RETURN_IF_ERROR(ListSize(r.size(), field));
    out->resize(r.size());
    for (size_t i = 0; i < out->size(); ++i) (*out)[i] = r[i];
    return Status::OK();
  }
  Status Read(w::SaveShards::Reader r, SaveShards* m) const {
    SF_RETURN_IF_ERROR(Text(r.getDir(), "SaveShards.dir", &m->dir));
    m->token = r.getToken();
    m->task = r.getTask();
    m->global_step = r.getGlobalStep();
    SF_RETURN_IF_ERROR(Names(r.getNames(), "SaveShards.names", &m->names));
    return Tokens(r.getDrop(), "SaveShards.drop", &m->drop);
  }
  Status Read(w::CommitShards::Reader r, CommitShards* m) const {
    SF_RETURN_IF_ERROR(Text(r.getDir(), "CommitShards.dir", &m->dir));
    m->token = r.getToken();
    m->tasks = r.getTasks();
    m->global_step = r.getGlobalStep();
    m->keep_last = r.getKeepLast();
    return Status::OK();
  }
  Status Read(w::RestoreShards::Reader r, RestoreShards* m) const {
    SF_RETURN_IF_ERROR(Text(r.getDir(), "RestoreShards.dir", &m->dir));
    m->token = r.getToken();
    m->id = r.getId();
    m->task = r.getTask();
    return Names(r.getNames(), "RestoreShards.names", &m->names);
  }
  Status Read(w::MoveSlot::Reader r, MoveSlot* m) const {
    m->slot = r.getSlot();
    SF_RETURN_IF_ERROR(Text(r.getTo(), "MoveSlot.to", &m->to));
    m->epoch = r.getEpoch();
    return Status::OK();
  }
  Status Read(w::SyncSlot::Reader r, SyncSlot* m) const {
    m->slot = r.getSlot();
    SF_RETURN_IF_ERROR(Text(r.getBackup(), "SyncSlot.backup", &m->backup));
    m->epoch = r.getEpoch();
    return Status::OK();
  }
  Status Read(w::ReplicateSlot::Reader r, ReplicateSlot* m) const {
    m->slot = r.getSlot();
    m->epoch = r.getEpoch();
    SF_RETURN_IF_ERROR(Text(r.getHolder(), "ReplicateSlot.holder", &m->holder));
    m->full = r.getFull();
    m->round = r.getRound();
    m->more = r.getMore();
    SF_RETURN_IF_ERROR(Names(r.getNames(), "ReplicateSlot.names", &m->names));
    SF_ASSIGN_OR_RETURN(m->values, Tensors(r.getValues(), "ReplicateSlot.values"));
    SF_ASSIGN_OR_RETURN(m->rows, Tensors(r.getRows(), "ReplicateSlot.rows"));
    SF_ASSIGN_OR_RETURN(m->origins, Tensors(r.getOrigins(), "ReplicateSlot.origins"));
    auto leading = r.getLeading();  // read once: each read is charged to the traversal limit
    SF_RETURN_IF_ERROR(ListSize(leading.size(), "ReplicateSlot.leading"));
    for (int64_t n : leading) m->leading.push_back(n);
    auto counters = r.getCounters();
    SF_RETURN_IF_ERROR(ListSize(counters.size(), "ReplicateSlot.counters"));
    for (int64_t n : counters) m->counters.push_back(n);
    if (!m->counters.empty() && m->counters.size() != ReplicateSlot::kReplicaCounters * m->names.size())
      return InvalidArgument("ReplicateSlot: " + std::to_string(m->counters.size()) + " counters for " +
                             std::to_string(m->names.size()) + " names (none, or " +
                             std::to_string(ReplicateSlot::kReplicaCounters) + " per name)");
    SF_ASSIGN_OR_RETURN(m->clocks, Tensors(r.getClocks(), "ReplicateSlot.clocks"));
    if (!m->clocks.empty() && m->clocks.size() != m->names.size())
      return InvalidArgument("ReplicateSlot: " + std::to_string(m->clocks.size()) + " clock lists for " +
                             std::to_string(m->names.size()) + " names (none, or one per name)");
    for (const sf::Tensor& c : m->clocks)
      if (c.dtype() != DType::kInt64 || c.rank() != 1)
        return InvalidArgument("ReplicateSlot: clocks must be int64 [workers], got " + c.DebugString(0));
    if (m->values.size() != m->names.size() || m->rows.size() != m->names.size() ||
        m->origins.size() != m->names.size() || m->leading.size() != m->names.size())
      return InvalidArgument("ReplicateSlot: " + std::to_string(m->names.size()) + " names but " +
                             std::to_string(m->values.size()) + " values, " + std::to_string(m->rows.size()) +
                             " row lists, " + std::to_string(m->origins.size()) + " origin lists and " +
                             std::to_string(m->leading.size()) + " leading dimensions");
    return Status::OK();
  }
  Status Read(w::ListNamespaces::Reader, ListNamespaces*) const { return Status::OK(); }
  Status Read(w::DropNamespace::Reader r, DropNamespace* m) const {
    return Text(r.getNs(), "DropNamespace.ns", &m->ns);
  }
  Status Read(w::Namespaces::Reader r, Namespaces* m) const {
    auto list = r.getNamespaces();
    SF_RETURN_IF_ERROR(ListSize(list.size(), "Namespaces.namespaces"));
    m->namespaces.resize(list.size());
    for (unsigned i = 0; i < list.size(); ++i) {
      NamespaceState& n = m->namespaces[i];
      SF_RETURN_IF_ERROR(Text(list[i].getNs(), "Namespaces.ns", &n.ns));
      n.variables = list[i].getVariables();
      n.tables = list[i].getTables();
      n.queues = list[i].getQueues();
      n.bytes = list[i].getBytes();
      n.sessions = list[i].getSessions();
    }
    return Status::OK();
  }
  Status Read(w::ShardsDone::Reader r, ShardsDone* m) const {
    m->id = r.getId();
    m->token = r.getToken();
    m->global_step = r.getGlobalStep();
    m->variables = r.getVariables();
    m->bytes = r.getBytes();
    return Tokens(r.getDropped(), "ShardsDone.dropped", &m->dropped);
  }

  template <class T, class R>
  Result<Body> As(R r) const {
    T m;
    SF_RETURN_IF_ERROR(Read(r, &m));
    return Body(std::move(m));
  }

  Result<Body> Get(EnvBody::Reader e) const {
    switch (e.which()) {
      case EnvBody::HEARTBEAT: return As<Heartbeat>(e.getHeartbeat());
      case EnvBody::STATUS_REPLY: return As<StatusReply>(e.getStatusReply());
      case EnvBody::LIST_MEMBERS: return As<ListMembers>(e.getListMembers());
      case EnvBody::MEMBERSHIP: return As<Membership>(e.getMembership());
      case EnvBody::REGISTER_PARTITION: return As<RegisterPartition>(e.getRegisterPartition());
      case EnvBody::RUN_PARTITION: return As<RunPartition>(e.getRunPartition());
      case EnvBody::RUN_PARTITION_DONE: return As<RunPartitionDone>(e.getRunPartitionDone());
      case EnvBody::SEND_TENSOR: return As<SendTensor>(e.getSendTensor());
      case EnvBody::ABORT_STEP: return As<AbortStep>(e.getAbortStep());
      case EnvBody::CLEANUP_STEP: return As<CleanupStep>(e.getCleanupStep());
      case EnvBody::STEP_PROGRESS: return As<StepProgress>(e.getStepProgress());
      case EnvBody::CLOSE_SESSION: return As<CloseSession>(e.getCloseSession());
      case EnvBody::ECHO: return As<Echo>(e.getEcho());
      case EnvBody::COLLECTIVE_CHUNK: return As<CollectiveChunk>(e.getCollectiveChunk());
      case EnvBody::COLLECTIVE_ANNOUNCE: return As<CollectiveAnnounce>(e.getCollectiveAnnounce());
      case EnvBody::READ_VARIABLES: return As<ReadVariables>(e.getReadVariables());
      case EnvBody::VARIABLE_VALUES: return As<VariableValues>(e.getVariableValues());
      case EnvBody::ASSIGN_VARIABLES: return As<AssignVariables>(e.getAssignVariables());
      case EnvBody::SAVE_SHARDS: return As<SaveShards>(e.getSaveShards());
      case EnvBody::COMMIT_SHARDS: return As<CommitShards>(e.getCommitShards());
      case EnvBody::RESTORE_SHARDS: return As<RestoreShards>(e.getRestoreShards());
      case EnvBody::SHARDS_DONE: return As<ShardsDone>(e.getShardsDone());
      case EnvBody::MOVE_SLOT: return As<MoveSlot>(e.getMoveSlot());
      case EnvBody::SYNC_SLOT: return As<SyncSlot>(e.getSyncSlot());
      case EnvBody::REPLICATE_SLOT: return As<ReplicateSlot>(e.getReplicateSlot());
      case EnvBody::LIST_NAMESPACES: return As<ListNamespaces>(e.getListNamespaces());
      case EnvBody::DROP_NAMESPACE: return As<DropNamespace>(e.getDropNamespace());
      case EnvBody::NAMESPACES: return As<Namespaces>(e.getNamespaces());
    }
    return InvalidArgument("unknown message kind " + std::to_string(static_cast<unsigned>(e.which())) +
                           " (union member of Envelope.body)");
  }
};

uint32_t LoadLE32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Splits the segment table of a flat Cap'n Proto message (`words` words at
// `base`) into segments; DataLoss when it is truncated or inconsistent.
Status SplitSegments(const capnp::word* base, uint64_t words, std::vector<kj::ArrayPtr<const capnp::word>>* out) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(base);
  const uint64_t count = uint64_t{LoadLE32(bytes)} + 1;
  const uint64_t table_words = count / 2 + 1;  // (1 + count) u32s rounded up to words
  if (count > kBaseSegments + words / (kReferenceBytes / sizeof(capnp::word)))
    return DataLoss("frame body claims " + std::to_string(count) + " segments, more than " +
                    std::to_string(words * 8) + " bytes can hold");
  if (table_words > words) return DataLoss("frame body ends inside its segment table (truncated?)");
  out->reserve(count);
  uint64_t offset = table_words;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t size = LoadLE32(bytes + 4 * (i + 1));
    if (size > words - offset)
      return DataLoss("frame body ends inside segment " + std::to_string(i) + " (truncated?)");
    out->emplace_back(base + offset, size);
    offset += size;
  }
  if (offset != words)
    return DataLoss("frame body has " + std::to_string((words - offset) * 8) + " bytes after its last segment");
  if ((*out)[0].size() == 0) return DataLoss("frame body has an empty first segment (no message)");
  return Status::OK();
}

}  // namespace wire_detail
}  // namespace net
}  // namespace sf

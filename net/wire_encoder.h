// The encoder of net/wire.h's messages into their Cap'n Proto forms
// (proto/messages.capnp): an internal header of net/wire.cc, kept apart so
// neither half of the codec is one long file. Not a public header.
#pragma once

#include <capnp/message.h>
#include <capnp/orphan.h>
#include <kj/exception.h>

#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <map>
#include <type_traits>
#include <unordered_map>

#include "graph/tensor_proto.h"
#include "proto/messages.capnp.h"
#include "net/wire.h"
#include "net/wire_envelope.h"
#include "net/wire_envelope.h"

namespace sf {
namespace net {
namespace wire_detail {

namespace w = proto::wire;
using EnvBody = w::Envelope::Body;

// Cap'n Proto blobs and lists hold fewer than 2^29 elements (Text also needs its NUL).
constexpr uint64_t kMaxBlobBytes = (uint64_t{1} << 29) - 1;
// Tensors at least this big are referenced as their own segment instead of
// copied; below it a copy is cheaper than an extra iovec and segment.
constexpr size_t kReferenceBytes = 4096;
// A decoded message may have at most this many segments, plus one per
// kReferenceBytes of body (what an encoder referencing tensors produces).
constexpr uint64_t kBaseSegments = 64;
// Deepest pointer chain of an Envelope: body struct, list, tensor, shape.
constexpr int kNestingLimit = 8;
// The highest sf::Code (include/shardflow/status.h); a peer's larger code is refused.
constexpr uint32_t kMaxCode = static_cast<uint32_t>(Code::kResourceExhausted);

// ---------------------------------------------------------------- encoding

// Writes each Body alternative into the Envelope's union; InvalidArgument
// naming the field when a value does not fit Cap'n Proto's limits.
struct Encoder {
  capnp::Orphanage orphanage;
  // Tensor bytes referenced as external segments: (address, size).
  std::vector<std::pair<const void*, size_t>>* externals;
  // Reference only tensors of whole words: a message Cap'n Proto writes
  // itself (RPC) would send a partial last word's padding bytes as they are.
  bool whole_words_only = false;
  // False: copy every tensor into the message (one whose lifetime the
  // encoder's caller cannot follow, such as an RPC return).
  bool reference = true;

  static Status Text(const std::string& s, const char* field) {
    if (s.size() >= kMaxBlobBytes)
      return InvalidArgument(std::string(field) + " has " + std::to_string(s.size()) +
                             " bytes; a Cap'n Proto Text holds fewer than 2^29");
    return Status::OK();
  }
  static capnp::Text::Reader AsText(const std::string& s) { return capnp::Text::Reader(s.c_str(), s.size()); }
  static capnp::Data::Reader AsData(const std::string& s) {
    return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(s.data()), s.size());
  }
  static Status ListSize(size_t n, const char* field) {
    if (n > kMaxBlobBytes)
      return InvalidArgument(std::string(field) + " has " + std::to_string(n) +
                             " elements; a Cap'n Proto list holds fewer than 2^29");
    return Status::OK();
  }

  Status Tensor(const sf::Tensor& t, proto::Tensor::Builder b, const std::string& field) const {
    const auto d = static_cast<uint8_t>(t.dtype());
    if (d > static_cast<uint8_t>(DType::kResource))
      return InvalidArgument(field + ": unknown dtype " + std::to_string(d));
    b.setDtype(DTypeToProto(t.dtype()));
    if (!t.valid()) return Status::OK();
    if (t.bytes() > kMaxBlobBytes)
      return InvalidArgument(field + ": tensor " + DTypeName(t.dtype()) + ShapeString(t.shape()) + " has " +
                             std::to_string(t.bytes()) + " bytes; at most 536870911 fit in one frame field");
    auto shape = b.initShape(t.rank());
    for (int i = 0; i < t.rank(); ++i) shape.set(i, t.dim(i));
    const size_t n = t.bytes();
    if (n == 0) return Status::OK();
    if (reference && n >= kReferenceBytes && (!whole_words_only || n % 8 == 0)) {
      // Tensor buffers are 64-byte aligned and padded to 64 bytes, so the
      // word-rounded segment Cap'n Proto references stays inside the buffer.
      b.adoptData(orphanage.referenceExternalData(
          capnp::Data::Reader(static_cast<const capnp::byte*>(t.raw_data()), n)));
      externals->emplace_back(t.raw_data(), n);
    } else {
      auto data = b.initData(n);
      std::memcpy(data.begin(), t.raw_data(), n);
    }
    return Status::OK();
  }

  Status StatusTo(const sf::Status& s, w::Status::Builder b, const char* field) const {
    SF_RETURN_IF_ERROR(Text(s.message(), field));
    b.setCode(static_cast<uint32_t>(s.code()));
    b.setMessage(AsText(s.message()));
    return Status::OK();
  }

  Status OutputRefs(const std::vector<OutputRef>& refs, capnp::List<w::OutputRef>::Builder b,
                    const char* field) const {
    for (size_t i = 0; i < refs.size(); ++i) {
      SF_RETURN_IF_ERROR(Text(refs[i].node, field));
      b[i].setNode(AsText(refs[i].node));
      b[i].setIndex(refs[i].index);
    }
    return Status::OK();
  }

  Status Members(const std::vector<Member>& ms, capnp::List<w::Member>::Builder b, const char* field) const {
    for (size_t i = 0; i < ms.size(); ++i) {
      SF_RETURN_IF_ERROR(Text(ms[i].name, field));
      SF_RETURN_IF_ERROR(Text(ms[i].address, field));
      b[i].setName(AsText(ms[i].name));
      b[i].setAddress(AsText(ms[i].address));
      b[i].setIncarnation(ms[i].incarnation);
    }
    return Status::OK();
  }

  Status Tensors(const std::vector<sf::Tensor>& ts, capnp::List<proto::Tensor>::Builder b,
                 const char* field) const {
    for (size_t i = 0; i < ts.size(); ++i)
      SF_RETURN_IF_ERROR(Tensor(ts[i], b[i], std::string(field) + "[" + std::to_string(i) + "]"));
    return Status::OK();
  }

  Status Put(const Heartbeat&, w::Heartbeat::Builder) const {
    return Status::OK();
  }
  Status Put(const StatusReply& m, w::StatusReply::Builder b) const {
    return StatusTo(m.status, b.initStatus(), "StatusReply.status");
  }
  Status Put(const ListMembers&, w::ListMembers::Builder) const {
    return Status::OK();
  }
  Status Put(const Membership& m, w::Membership::Builder b) const {
    SF_RETURN_IF_ERROR(ListSize(m.members.size(), "Membership.members"));
    SF_RETURN_IF_ERROR(ListSize(m.leaving.size(), "Membership.leaving"));
    SF_RETURN_IF_ERROR(Members(m.members, b.initMembers(m.members.size()), "Membership.members"));
    SF_RETURN_IF_ERROR(ListSize(m.map_holder.size(), "Membership.map_holder"));
    SF_RETURN_IF_ERROR(ListSize(m.map_from.size(), "Membership.map_from"));
    SF_RETURN_IF_ERROR(Names(m.map_holder, b.initMapHolder(m.map_holder.size()), "Membership.map_holder"));
    SF_RETURN_IF_ERROR(Names(m.map_from, b.initMapFrom(m.map_from.size()), "Membership.map_from"));
    SF_RETURN_IF_ERROR(ListSize(m.map_lost_after.size(), "Membership.map_lost_after"));
    auto lost = b.initMapLostAfter(m.map_lost_after.size());
    for (size_t i = 0; i < m.map_lost_after.size(); ++i) lost.set(i, m.map_lost_after[i]);
    b.setMapEpoch(m.map_epoch);
    b.setMapSlots(m.map_slots);
    return Members(m.leaving, b.initLeaving(m.leaving.size()), "Membership.leaving");
  }
  Status Put(const RegisterPartition& m, w::RegisterPartition::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.device, "RegisterPartition.device"));
    if (m.graph_def.size() > kMaxBlobBytes)
      return InvalidArgument("RegisterPartition.graph_def has " + std::to_string(m.graph_def.size()) +
                             " bytes; at most 536870911 fit in one frame field");
    SF_RETURN_IF_ERROR(ListSize(m.feeds.size(), "RegisterPartition.feeds"));
    SF_RETURN_IF_ERROR(ListSize(m.fetches.size(), "RegisterPartition.fetches"));
    // A node refuses more (net/messages.h): said here, before it is sent.
    if (m.tasks.size() > kMaxRegisteredTasks)
      return InvalidArgument("RegisterPartition.tasks has " + std::to_string(m.tasks.size()) +
                             " tasks; a node accepts at most " + std::to_string(kMaxRegisteredTasks));
    if (m.feeds.size() + m.fetches.size() + m.targets.size() > kMaxRegisteredNodes)
      return InvalidArgument("RegisterPartition names " +
                             std::to_string(m.feeds.size() + m.fetches.size() + m.targets.size()) +
                             " feeds, fetches and targets; a node accepts at most " +
                             std::to_string(kMaxRegisteredNodes) + " (a partition of fewer nodes per step)");
    b.setSessionId(m.session_id);
    b.setHandle(m.handle);
    b.setDevice(AsText(m.device));
    b.setGraphDef(AsData(m.graph_def));
    SF_RETURN_IF_ERROR(OutputRefs(m.feeds, b.initFeeds(m.feeds.size()), "RegisterPartition.feeds"));
    SF_RETURN_IF_ERROR(OutputRefs(m.fetches, b.initFetches(m.fetches.size()), "RegisterPartition.fetches"));
    SF_RETURN_IF_ERROR(ListSize(m.tasks.size(), "RegisterPartition.tasks"));
    SF_RETURN_IF_ERROR(Members(m.tasks, b.initTasks(m.tasks.size()), "RegisterPartition.tasks"));
    SF_RETURN_IF_ERROR(ListSize(m.targets.size(), "RegisterPartition.targets"));
    b.setEpoch(m.epoch);
    return Names(m.targets, b.initTargets(m.targets.size()), "RegisterPartition.targets");
  }
  Status Put(const RunPartition& m, w::RunPartition::Builder b) const {
    SF_RETURN_IF_ERROR(ListSize(m.feeds.size(), "RunPartition.feeds"));
    b.setSessionId(m.session_id);
    b.setHandle(m.handle);
    b.setStepId(m.step_id);
    b.setTraceMaxEvents(m.trace_max_events);
    b.setProgressMs(m.progress_ms);
    return Tensors(m.feeds, b.initFeeds(m.feeds.size()), "RunPartition.feeds");
  }
  Status Put(const RunPartitionDone& m, w::RunPartitionDone::Builder b) const {
    SF_RETURN_IF_ERROR(ListSize(m.fetches.size(), "RunPartitionDone.fetches"));
    SF_RETURN_IF_ERROR(ListSize(m.trace.events.size(), "RunPartitionDone.trace.events"));
    SF_RETURN_IF_ERROR(ListSize(m.trace.threads.size(), "RunPartitionDone.trace.threads"));
    b.setStepId(m.step_id);
    SF_RETURN_IF_ERROR(StatusTo(m.status, b.initStatus(), "RunPartitionDone.status"));
    if (!m.trace.events.empty() || !m.trace.threads.empty() || m.trace.dropped || m.trace_elapsed_ns) {
      auto t = b.initTrace();
      auto events = t.initEvents(m.trace.events.size());
      for (size_t i = 0; i < m.trace.events.size(); ++i) {
        const TraceEvent& ev = m.trace.events[i];
        SF_RETURN_IF_ERROR(Text(ev.name, "RunPartitionDone.trace.events.name"));
        SF_RETURN_IF_ERROR(Text(ev.op, "RunPartitionDone.trace.events.op"));
        SF_RETURN_IF_ERROR(Text(ev.category, "RunPartitionDone.trace.events.category"));
        auto o = events[i];
        o.setName(AsText(ev.name));
        o.setOp(AsText(ev.op));
        o.setCategory(AsText(ev.category));
        o.setThread(ev.thread);
        o.setStartNs(ev.start_ns);
        o.setDurNs(ev.dur_ns);
      }
      auto threads = t.initThreads(m.trace.threads.size());
      for (size_t i = 0; i < m.trace.threads.size(); ++i) {
        SF_RETURN_IF_ERROR(Text(m.trace.threads[i], "RunPartitionDone.trace.threads"));
        threads.set(i, AsText(m.trace.threads[i]));
      }
      t.setDropped(m.trace.dropped);
      t.setElapsedNs(m.trace_elapsed_ns);
    }
    return Tensors(m.fetches, b.initFetches(m.fetches.size()), "RunPartitionDone.fetches");
  }
  Status Put(const SendTensor& m, w::SendTensor::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.edge, "SendTensor.edge"));
    SF_RETURN_IF_ERROR(Text(m.frame, "SendTensor.frame"));
    b.setStepId(m.step_id);
    b.setEdge(AsText(m.edge));
    b.setFrame(AsText(m.frame));
    b.setIteration(m.iteration);
    b.setIsDead(m.is_dead);
    b.setSessionId(m.session_id);
    return Tensor(m.value, b.initValue(), "SendTensor.value");
  }
  Status Put(const AbortStep& m, w::AbortStep::Builder b) const {
    b.setStepId(m.step_id);
    b.setSessionId(m.session_id);
    return StatusTo(m.status, b.initStatus(), "AbortStep.status");
  }
  Status Put(const CleanupStep& m, w::CleanupStep::Builder b) const {
    b.setStepId(m.step_id);
    b.setSessionId(m.session_id);
    return Status::OK();
  }
  Status Put(const StepProgress& m, w::StepProgress::Builder b) const {
    b.setSessionId(m.session_id);
    b.setStepId(m.step_id);
    b.setOps(m.ops);
    return Status::OK();
  }
  Status Put(const CloseSession& m, w::CloseSession::Builder b) const {
    b.setSessionId(m.session_id);
    return Status::OK();
  }
  Status Put(const ReadVariables& m, w::ReadVariables::Builder b) const {
    SF_RETURN_IF_ERROR(ListSize(m.names.size(), "ReadVariables.names"));
    return Names(m.names, b.initNames(m.names.size()), "ReadVariables.names");
  }
  Status Put(const VariableValues& m, w::VariableValues::Builder b) const {
    return NamedTensors(m.names, m.values, b, "VariableValues");
  }
  Status Put(const AssignVariables& m, w::AssignVariables::Builder b) const {
    return NamedTensors(m.names, m.values, b, "AssignVariables");
  }
  // Names and their values (one per name), into a struct of names and values.
  template <class B>
  Status NamedTensors(const std::vector<std::string>& names, const std::vector<sf::Tensor>& values, B b,
                      const std::string& what) const {
    const std::string n = what + ".names", v = what + ".values";
    if (names.size() != values.size())
      return InvalidArgument(what + ": " + std::to_string(names.size()) + " names but " +
                             std::to_string(values.size()) + " values");
    SF_RETURN_IF_ERROR(ListSize(names.size(), n.c_str()));
    SF_RETURN_IF_ERROR(Names(names, b.initNames(names.size()), n.c_str()));
    return Tensors(values, b.initValues(values.size()), v.c_str());
  }
  // A list of names, each checked as Text.
  template <class B>
  Status Names(const std::vector<std::string>& names, B b, const char* field) const {
    for (size_t i = 0; i < names.size(); ++i) {
      SF_RETURN_IF_ERROR(Text(names[i], field));
      b.set(i, AsText(names[i]));
    }
    return Status::OK();
  }
  template <class B>
  static void Tokens(const std::vector<uint64_t>& tokens, B b) {
    for (size_t i = 0; i < tokens.size(); ++i) b.set(i, tokens[i]);
  }
  Status Put(const SaveShards& m, w::SaveShards::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.dir, "SaveShards.dir"));
    SF_RETURN_IF_ERROR(ListSize(m.names.size(), "SaveShards.names"));
    SF_RETURN_IF_ERROR(ListSize(m.drop.size(), "SaveShards.drop"));
    b.setDir(AsText(m.dir));
    b.setToken(m.token);
    b.setTask(m.task);
    b.setGlobalStep(m.global_step);
    Tokens(m.drop, b.initDrop(m.drop.size()));
    return Names(m.names, b.initNames(m.names.size()), "SaveShards.names");
  }
  Status Put(const CommitShards& m, w::CommitShards::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.dir, "CommitShards.dir"));
    b.setDir(AsText(m.dir));
    b.setToken(m.token);
    b.setTasks(m.tasks);
    b.setGlobalStep(m.global_step);
    b.setKeepLast(m.keep_last);
    return Status::OK();
  }
  Status Put(const RestoreShards& m, w::RestoreShards::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.dir, "RestoreShards.dir"));
    SF_RETURN_IF_ERROR(ListSize(m.names.size(), "RestoreShards.names"));
    b.setDir(AsText(m.dir));
    b.setToken(m.token);
    b.setId(m.id);
    b.setTask(m.task);
    return Names(m.names, b.initNames(m.names.size()), "RestoreShards.names");
  }
  Status Put(const MoveSlot& m, w::MoveSlot::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.to, "MoveSlot.to"));
    b.setSlot(m.slot);
    b.setTo(AsText(m.to));
    b.setEpoch(m.epoch);
    return Status::OK();
  }
  Status Put(const SyncSlot& m, w::SyncSlot::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.backup, "SyncSlot.backup"));
    b.setSlot(m.slot);
    b.setBackup(AsText(m.backup));
    b.setEpoch(m.epoch);
    return Status::OK();
  }
  Status Put(const ReplicateSlot& m, w::ReplicateSlot::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.holder, "ReplicateSlot.holder"));
    SF_RETURN_IF_ERROR(ListSize(m.names.size(), "ReplicateSlot.names"));
    SF_RETURN_IF_ERROR(ListSize(m.values.size(), "ReplicateSlot.values"));
    SF_RETURN_IF_ERROR(ListSize(m.rows.size(), "ReplicateSlot.rows"));
    SF_RETURN_IF_ERROR(ListSize(m.origins.size(), "ReplicateSlot.origins"));
    SF_RETURN_IF_ERROR(ListSize(m.leading.size(), "ReplicateSlot.leading"));
    b.setSlot(m.slot);
    b.setEpoch(m.epoch);
    b.setHolder(AsText(m.holder));
    b.setFull(m.full);
    b.setRound(m.round);
    b.setMore(m.more);
    SF_RETURN_IF_ERROR(Names(m.names, b.initNames(m.names.size()), "ReplicateSlot.names"));
    SF_RETURN_IF_ERROR(Tensors(m.values, b.initValues(m.values.size()), "ReplicateSlot.values"));
    SF_RETURN_IF_ERROR(Tensors(m.rows, b.initRows(m.rows.size()), "ReplicateSlot.rows"));
    auto leading = b.initLeading(static_cast<unsigned>(m.leading.size()));
    for (size_t i = 0; i < m.leading.size(); ++i) leading.set(static_cast<unsigned>(i), m.leading[i]);
    SF_RETURN_IF_ERROR(ListSize(m.counters.size(), "ReplicateSlot.counters"));
    auto counters = b.initCounters(static_cast<unsigned>(m.counters.size()));
    for (size_t i = 0; i < m.counters.size(); ++i) counters.set(static_cast<unsigned>(i), m.counters[i]);
    SF_RETURN_IF_ERROR(ListSize(m.clocks.size(), "ReplicateSlot.clocks"));
    SF_RETURN_IF_ERROR(Tensors(m.clocks, b.initClocks(m.clocks.size()), "ReplicateSlot.clocks"));
    return Tensors(m.origins, b.initOrigins(m.origins.size()), "ReplicateSlot.origins");
  }
  Status Put(const ListNamespaces&, w::ListNamespaces::Builder) const { return Status::OK(); }
  Status Put(const DropNamespace& m, w::DropNamespace::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.ns, "DropNamespace.ns"));
    b.setNs(AsText(m.ns));
    return Status::OK();
  }
  Status Put(const Namespaces& m, w::Namespaces::Builder b) const {
    SF_RETURN_IF_ERROR(ListSize(m.namespaces.size(), "Namespaces.namespaces"));
    auto list = b.initNamespaces(static_cast<unsigned>(m.namespaces.size()));
    for (size_t i = 0; i < m.namespaces.size(); ++i) {
      const NamespaceState& n = m.namespaces[i];
      SF_RETURN_IF_ERROR(Text(n.ns, "Namespaces.ns"));
      auto e = list[static_cast<unsigned>(i)];
      e.setNs(AsText(n.ns));
      e.setVariables(n.variables);
      e.setTables(n.tables);
      e.setQueues(n.queues);
      e.setBytes(n.bytes);
      e.setSessions(n.sessions);
    }
    return Status::OK();
  }
  Status Put(const ShardsDone& m, w::ShardsDone::Builder b) const {
    SF_RETURN_IF_ERROR(ListSize(m.dropped.size(), "ShardsDone.dropped"));
    b.setId(m.id);
    b.setToken(m.token);
    b.setGlobalStep(m.global_step);
    b.setVariables(m.variables);
    b.setBytes(m.bytes);
    Tokens(m.dropped, b.initDropped(m.dropped.size()));
    return Status::OK();
  }
  // The fields a chunk and an announcement share.
  template <class M, class Builder>
  static Status GroupFields(const M& m, const char* group_key, const char* address, Builder b) {
    SF_RETURN_IF_ERROR(Text(m.group_key, group_key));
    SF_RETURN_IF_ERROR(Text(m.address, address));
    b.setGroupKey(AsText(m.group_key));
    b.setGroupSize(m.group_size);
    b.setFromRank(m.from_rank);
    b.setAddress(AsText(m.address));
    b.setEpoch(m.epoch);
    return Status::OK();
  }
  Status Put(const CollectiveChunk& m, w::CollectiveChunk::Builder b) const {
    SF_RETURN_IF_ERROR(GroupFields(m, "CollectiveChunk.group_key", "CollectiveChunk.address", b));
    b.setGeneration(m.generation);
    b.setStep(m.step);
    b.setTotal(m.total);
    b.setOffset(m.offset);
    SF_RETURN_IF_ERROR(StatusTo(m.status, b.initStatus(), "CollectiveChunk.status"));
    return Tensor(m.chunk, b.initChunk(), "CollectiveChunk.chunk");
  }
  Status Put(const CollectiveAnnounce& m, w::CollectiveAnnounce::Builder b) const {
    return GroupFields(m, "CollectiveAnnounce.group_key", "CollectiveAnnounce.address", b);
  }
  Status Put(const Echo& m, w::Echo::Builder b) const {
    return Tensor(m.payload, b.initPayload(), "Echo.payload");
  }
};


}  // namespace wire_detail
}  // namespace net
}  // namespace sf

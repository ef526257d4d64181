#include "net/wire.h"

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
#include "net/wire_envelope.h"

namespace sf {
namespace net {

// The header's length field and tensor bytes are little-endian on the wire.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "net/wire assumes a little-endian host");

namespace {

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
    SF_RETURN_IF_ERROR(ListSize(m.ended.size(), "Membership.ended"));
    SF_RETURN_IF_ERROR(Members(m.members, b.initMembers(m.members.size()), "Membership.members"));
    SF_RETURN_IF_ERROR(Members(m.ended, b.initEnded(m.ended.size()), "Membership.ended"));
    return Members(m.leaving, b.initLeaving(m.leaving.size()), "Membership.leaving");
  }
  Status Put(const RegisterPartition& m, w::RegisterPartition::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.device, "RegisterPartition.device"));
    if (m.graph_def.size() > kMaxBlobBytes)
      return InvalidArgument("RegisterPartition.graph_def has " + std::to_string(m.graph_def.size()) +
                             " bytes; at most 536870911 fit in one frame field");
    SF_RETURN_IF_ERROR(ListSize(m.feeds.size(), "RegisterPartition.feeds"));
    SF_RETURN_IF_ERROR(ListSize(m.fetches.size(), "RegisterPartition.fetches"));
    b.setSessionId(m.session_id);
    b.setHandle(m.handle);
    b.setDevice(AsText(m.device));
    b.setGraphDef(AsData(m.graph_def));
    SF_RETURN_IF_ERROR(OutputRefs(m.feeds, b.initFeeds(m.feeds.size()), "RegisterPartition.feeds"));
    SF_RETURN_IF_ERROR(OutputRefs(m.fetches, b.initFetches(m.fetches.size()), "RegisterPartition.fetches"));
    SF_RETURN_IF_ERROR(ListSize(m.tasks.size(), "RegisterPartition.tasks"));
    SF_RETURN_IF_ERROR(Members(m.tasks, b.initTasks(m.tasks.size()), "RegisterPartition.tasks"));
    SF_RETURN_IF_ERROR(ListSize(m.targets.size(), "RegisterPartition.targets"));
    auto targets = b.initTargets(m.targets.size());
    for (size_t i = 0; i < m.targets.size(); ++i) {
      SF_RETURN_IF_ERROR(Text(m.targets[i], "RegisterPartition.targets"));
      targets.set(i, AsText(m.targets[i]));
    }
    return Status::OK();
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
  Status Put(const Variables& m, w::Variables::Builder b) const {
    SF_RETURN_IF_ERROR(ListSize(m.names.size(), "Variables.names"));
    SF_RETURN_IF_ERROR(ListSize(m.values.size(), "Variables.values"));
    b.setAssign(m.assign);
    auto names = b.initNames(m.names.size());
    for (size_t i = 0; i < m.names.size(); ++i) {
      SF_RETURN_IF_ERROR(Text(m.names[i], "Variables.names"));
      names.set(i, AsText(m.names[i]));
    }
    return Tensors(m.values, b.initValues(m.values.size()), "Variables.values");
  }
  Status Put(const CollectiveChunk& m, w::CollectiveChunk::Builder b) const {
    SF_RETURN_IF_ERROR(Text(m.group_key, "CollectiveChunk.group_key"));
    SF_RETURN_IF_ERROR(Text(m.address, "CollectiveChunk.address"));
    b.setGroupKey(AsText(m.group_key));
    b.setGroupSize(m.group_size);
    b.setGeneration(m.generation);
    b.setFromRank(m.from_rank);
    b.setStep(m.step);
    b.setTotal(m.total);
    b.setEpoch(m.epoch);
    b.setOffset(m.offset);
    b.setAddress(AsText(m.address));
    SF_RETURN_IF_ERROR(StatusTo(m.status, b.initStatus(), "CollectiveChunk.status"));
    return Tensor(m.chunk, b.initChunk(), "CollectiveChunk.chunk");
  }
  Status Put(const Echo& m, w::Echo::Builder b) const {
    return Tensor(m.payload, b.initPayload(), "Echo.payload");
  }
};

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
    SF_ASSIGN_OR_RETURN(m->ended, Members(r.getEnded(), "Membership.ended"));
    return Status::OK();
  }
  Status Read(w::RegisterPartition::Reader r, RegisterPartition* m) const {
    m->session_id = r.getSessionId();
    m->handle = r.getHandle();
    SF_RETURN_IF_ERROR(Text(r.getDevice(), "RegisterPartition.device", &m->device));
    SF_RETURN_IF_ERROR(Bytes(r.getGraphDef(), "RegisterPartition.graph_def", &m->graph_def, false));
    SF_ASSIGN_OR_RETURN(m->feeds, OutputRefs(r.getFeeds(), "RegisterPartition.feeds"));
    SF_ASSIGN_OR_RETURN(m->fetches, OutputRefs(r.getFetches(), "RegisterPartition.fetches"));
    SF_ASSIGN_OR_RETURN(m->tasks, Members(r.getTasks(), "RegisterPartition.tasks"));
    auto targets = r.getTargets();
    SF_RETURN_IF_ERROR(ListSize(targets.size(), "RegisterPartition.targets"));
    m->targets.resize(targets.size());
    for (size_t i = 0; i < targets.size(); ++i)
      SF_RETURN_IF_ERROR(Text(targets[i], Field("RegisterPartition.targets", i), &m->targets[i]));
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
  Status Read(w::CollectiveChunk::Reader r, CollectiveChunk* out) const {
    CollectiveChunk& m = *out;
    SF_RETURN_IF_ERROR(Text(r.getGroupKey(), "CollectiveChunk.group_key", &m.group_key));
    SF_RETURN_IF_ERROR(Text(r.getAddress(), "CollectiveChunk.address", &m.address));
    m.group_size = r.getGroupSize();
    m.generation = r.getGeneration();
    m.from_rank = r.getFromRank();
    m.step = r.getStep();
    m.total = r.getTotal();
    m.epoch = r.getEpoch();
    m.offset = r.getOffset();
    const std::string where = "CollectiveChunk of group '" + m.group_key + "'";
    if (m.group_size < 1 || m.group_size > 4096)
      return InvalidArgument(where + ": group_size " + std::to_string(m.group_size) + " is not in [1, 4096]");
    if (m.from_rank < 0 || m.from_rank >= m.group_size)
      return InvalidArgument(where + ": from_rank " + std::to_string(m.from_rank) + " is not in [0, " +
                             std::to_string(m.group_size) + ")");
    if (m.step < -1 || m.step >= 2 * (m.group_size - 1))
      return InvalidArgument(where + ": step " + std::to_string(m.step) + " is not in [-1, " +
                             std::to_string(2 * (m.group_size - 1)) + ")");
    if (m.generation < 0) return InvalidArgument(where + ": generation " + std::to_string(m.generation) + " is negative");
    if (m.total < 0) return InvalidArgument(where + ": total " + std::to_string(m.total) + " is negative");
    if (m.epoch < 0) return InvalidArgument(where + ": epoch " + std::to_string(m.epoch) + " is negative");
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
  Status Read(w::Variables::Reader r, Variables* m) const {
    m->assign = r.getAssign();
    SF_RETURN_IF_ERROR(ListSize(r.getNames().size(), "Variables.names"));
    m->names.resize(r.getNames().size());
    for (size_t i = 0; i < m->names.size(); ++i)
      SF_RETURN_IF_ERROR(Text(r.getNames()[i], Field("Variables.names", i), &m->names[i]));
    SF_ASSIGN_OR_RETURN(m->values, Tensors(r.getValues(), "Variables.values"));
    return Status::OK();
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
      case EnvBody::VARIABLES: return As<Variables>(e.getVariables());
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

}  // namespace

const char* BodyName(const Body& b) {
  static const char* const kNames[] = {
      "Heartbeat",
      "StatusReply",   "ListMembers",  "Membership",  "RegisterPartition", "RunPartition", "RunPartitionDone",
      "SendTensor",    "AbortStep",    "CleanupStep", "CloseSession",     "Echo",
      "Variables",     "CollectiveChunk", "StepProgress"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == std::variant_size_v<Body>, "a Body alternative lacks a name");
  return b.valueless_by_exception() ? "(none)" : kNames[b.index()];
}

Result<uint64_t> ParseFrameHeader(const uint8_t* header, const WireLimits& limits) {
  if (std::memcmp(header, kFrameMagic, sizeof(kFrameMagic)) != 0)
    return DataLoss("bad frame magic: not a shardflow peer (or a peer of an incompatible release)");
  const uint64_t n = LoadLE32(header + 4);
  if (n > limits.max_frame_bytes)
    return InvalidArgument("frame body of " + std::to_string(n) + " bytes exceeds the limit of " +
                           std::to_string(limits.max_frame_bytes));
  if (n % 8 != 0) return InvalidArgument("frame body of " + std::to_string(n) + " bytes is not a multiple of 8");
  return n;
}

// ---------------------------------------------------------------- Frame

struct Frame::State {
  capnp::MallocMessageBuilder builder;
  uint8_t header[kFrameHeaderBytes];
  std::vector<uint32_t> table;
  std::vector<std::pair<const void*, size_t>> externals;
  std::vector<uint64_t> tails;  // zero-padded last words of referenced tensors
  std::vector<iovec> pieces;
  uint64_t size = 0;
};

Frame::Frame() = default;
Frame::~Frame() = default;
Frame::Frame(Frame&&) noexcept = default;
Frame& Frame::operator=(Frame&&) noexcept = default;

const std::vector<iovec>& Frame::pieces() const {
  static const std::vector<iovec> kNone;
  return state_ ? state_->pieces : kNone;
}
uint64_t Frame::size() const { return state_ ? state_->size : 0; }

Status EncodeEnvelope(const Message& m, proto::wire::Envelope::Builder env, bool reference_tensors) {
  std::vector<std::pair<const void*, size_t>> externals;
  try {
    env.setVersion(kWireVersion);
    env.setRequestId(m.request_id);
    Encoder enc{capnp::Orphanage::getForMessageContaining(env), &externals, /*whole_words_only=*/true,
                reference_tensors};
    return std::visit([&](const auto& body) { return enc.Put(body, WireOf<std::decay_t<decltype(body)>>::Init(env.getBody())); }, m.body);
  } catch (const kj::Exception& e) {
    return InvalidArgument(std::string("cannot encode ") + BodyName(m.body) + ": " + e.getDescription().cStr());
  }
}

Status CheckEncodable(const Message& m) {
  // Per one-way message: a small first segment (tensors are referenced, so
  // the envelope itself is a few words), not the default 8 KiB calloc.
  capnp::MallocMessageBuilder scratch(64);
  return EncodeEnvelope(m, scratch.initRoot<proto::wire::Envelope>());
}

Result<Message> DecodeEnvelope(proto::wire::Envelope::Reader env, const WireLimits& limits) {
  try {
    if (env.getVersion() != kWireVersion)
      return FailedPrecondition("peer speaks wire version " + std::to_string(env.getVersion()) +
                                ", this node speaks " + std::to_string(kWireVersion));
    Message m;
    m.request_id = env.getRequestId();
    Decoder dec{limits};
    SF_ASSIGN_OR_RETURN(m.body, dec.Get(env.getBody()));
    return m;
  } catch (const kj::Exception& e) {
    return DataLoss(std::string("malformed message: ") + e.getDescription().cStr());
  } catch (const std::exception& e) {
    return DataLoss(std::string("malformed message: ") + e.what());
  }
}

template <class T>
Status EncodeStruct(const T& m, typename WireOf<T>::Proto::Builder b, bool reference_tensors) {
  std::vector<std::pair<const void*, size_t>> externals;
  try {
    Encoder enc{capnp::Orphanage::getForMessageContaining(b), &externals, /*whole_words_only=*/true,
                reference_tensors};
    return enc.Put(m, b);
  } catch (const kj::Exception& e) {
    return InvalidArgument(std::string("cannot encode ") + BodyName(Body(m)) + ": " + e.getDescription().cStr());
  }
}

template <class T>
Status DecodeStruct(typename WireOf<T>::Proto::Reader r, const WireLimits& limits, T* out) {
  try {
    Decoder dec{limits};
    return dec.Read(r, out);
  } catch (const kj::Exception& e) {
    return DataLoss(std::string("malformed message: ") + e.getDescription().cStr());
  } catch (const std::exception& e) {
    return DataLoss(std::string("malformed message: ") + e.what());
  }
}

Status DecodeStreamedHeader(proto::wire::SendTensor::Reader r, const WireLimits& limits, SendTensor* out,
                            DType* dtype, Shape* shape, uint64_t* bytes) {
  try {
    Decoder dec{limits};
    return dec.ReadStreamedHeader(r, out, dtype, shape, bytes);
  } catch (const kj::Exception& e) {
    return DataLoss(std::string("malformed message: ") + e.getDescription().cStr());
  } catch (const std::exception& e) {
    return DataLoss(std::string("malformed message: ") + e.what());
  }
}

#define SF_WIRE_STRUCT(T)                                                                        \
  template Status EncodeStruct<T>(const T&, WireOf<T>::Proto::Builder, bool);                     \
  template Status DecodeStruct<T>(WireOf<T>::Proto::Reader, const WireLimits&, T*);
SF_WIRE_STRUCT(Membership)
SF_WIRE_STRUCT(RegisterPartition)
SF_WIRE_STRUCT(RunPartition)
SF_WIRE_STRUCT(SendTensor)
SF_WIRE_STRUCT(AbortStep)
SF_WIRE_STRUCT(CleanupStep)
SF_WIRE_STRUCT(StepProgress)
SF_WIRE_STRUCT(CloseSession)
SF_WIRE_STRUCT(Echo)
SF_WIRE_STRUCT(Variables)
SF_WIRE_STRUCT(CollectiveChunk)
#undef SF_WIRE_STRUCT

Result<Frame> EncodeFrame(const Message& m) {
  Frame f;
  f.state_ = std::make_unique<Frame::State>();
  Frame::State& s = *f.state_;
  try {
    auto env = s.builder.initRoot<w::Envelope>();
    env.setVersion(kWireVersion);
    env.setRequestId(m.request_id);
    Encoder enc{s.builder.getOrphanage(), &s.externals};
    SF_RETURN_IF_ERROR(std::visit([&](const auto& body) { return enc.Put(body, WireOf<std::decay_t<decltype(body)>>::Init(env.getBody())); }, m.body));
  } catch (const kj::Exception& e) {
    return InvalidArgument(std::string("cannot encode ") + BodyName(m.body) + ": " + e.getDescription().cStr());
  }

  auto segments = s.builder.getSegmentsForOutput();
  s.table.assign((segments.size() + 2) & ~size_t{1}, 0);
  s.table[0] = static_cast<uint32_t>(segments.size() - 1);
  uint64_t body = s.table.size() * sizeof(uint32_t);
  for (size_t i = 0; i < segments.size(); ++i) {
    s.table[i + 1] = static_cast<uint32_t>(segments[i].size());
    body += segments[i].size() * sizeof(capnp::word);
  }
  if (body > std::numeric_limits<uint32_t>::max())
    return InvalidArgument(std::string(BodyName(m.body)) + " encodes to " + std::to_string(body) +
                           " bytes; a frame holds less than 4 GiB");
  std::memcpy(s.header, kFrameMagic, sizeof(kFrameMagic));
  const uint32_t body32 = static_cast<uint32_t>(body);
  std::memcpy(s.header + 4, &body32, 4);
  s.size = kFrameHeaderBytes + body;

  const std::unordered_map<const void*, size_t> external_bytes(s.externals.begin(), s.externals.end());
  s.tails.reserve(s.externals.size());
  s.pieces.reserve(2 + segments.size() + s.externals.size());
  s.pieces.push_back({s.header, kFrameHeaderBytes});
  s.pieces.push_back({s.table.data(), s.table.size() * sizeof(uint32_t)});
  for (auto seg : segments) {
    const size_t bytes = seg.size() * sizeof(capnp::word);
    auto ext = external_bytes.find(seg.begin());
    const size_t exact = ext == external_bytes.end() ? bytes : ext->second;
    if (exact % 8 == 0) {
      s.pieces.push_back({const_cast<capnp::word*>(seg.begin()), bytes});
      continue;
    }
    // A referenced tensor whose size is not whole words: send its last word
    // from a zero-padded copy rather than the buffer's uninitialised padding.
    const size_t whole = exact & ~size_t{7};
    if (whole > 0) s.pieces.push_back({const_cast<capnp::word*>(seg.begin()), whole});
    uint64_t tail = 0;
    std::memcpy(&tail, reinterpret_cast<const uint8_t*>(seg.begin()) + whole, exact - whole);
    s.tails.push_back(tail);
    s.pieces.push_back({&s.tails.back(), sizeof(uint64_t)});
  }
  return f;
}

Result<Message> DecodeBody(const uint8_t* body, uint64_t size, const WireLimits& limits) {
  if (size > limits.max_frame_bytes)
    return InvalidArgument("frame body of " + std::to_string(size) + " bytes exceeds the limit of " +
                           std::to_string(limits.max_frame_bytes));
  if (size == 0) return DataLoss("empty frame body");
  if (size % 8 != 0)
    return DataLoss("frame body of " + std::to_string(size) + " bytes is not whole 8-byte words (truncated?)");
  const uint64_t words = size / 8;
  kj::Array<capnp::word> aligned;
  const capnp::word* base = reinterpret_cast<const capnp::word*>(body);
  if (reinterpret_cast<uintptr_t>(body) % alignof(capnp::word) != 0) {
    aligned = kj::heapArray<capnp::word>(words);
    std::memcpy(aligned.begin(), body, size);
    base = aligned.begin();
  }
  std::vector<kj::ArrayPtr<const capnp::word>> segments;
  SF_RETURN_IF_ERROR(SplitSegments(base, words, &segments));

  capnp::ReaderOptions options;
  // Each word is read once by a well-formed message; the slack covers the
  // per-element charge Cap'n Proto makes for lists of empty structs.
  options.traversalLimitInWords = words + 64;
  options.nestingLimit = kNestingLimit;
  try {
    capnp::SegmentArrayMessageReader reader(
        kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>(segments.data(), segments.size()), options);
    return DecodeEnvelope(reader.getRoot<w::Envelope>(), limits);
  } catch (const kj::Exception& e) {
    return DataLoss(std::string("malformed frame: ") + e.getDescription().cStr());
  } catch (const std::exception& e) {
    return DataLoss(std::string("malformed frame: ") + e.what());
  }
}

Result<std::string> EncodeToString(const Message& m) {
  SF_ASSIGN_OR_RETURN(Frame f, EncodeFrame(m));
  std::string out;
  out.reserve(f.size());
  for (const iovec& v : f.pieces()) out.append(static_cast<const char*>(v.iov_base), v.iov_len);
  return out;
}

Result<Message> DecodeFrameString(const std::string& frame, const WireLimits& limits) {
  if (frame.size() < kFrameHeaderBytes)
    return DataLoss("frame of " + std::to_string(frame.size()) + " bytes is shorter than its header");
  const auto* p = reinterpret_cast<const uint8_t*>(frame.data());
  SF_ASSIGN_OR_RETURN(uint64_t n, ParseFrameHeader(p, limits));
  if (frame.size() - kFrameHeaderBytes != n)
    return DataLoss("frame header says " + std::to_string(n) + " body bytes but " +
                    std::to_string(frame.size() - kFrameHeaderBytes) + " follow");
  return DecodeBody(p + kFrameHeaderBytes, n, limits);
}

}  // namespace net
}  // namespace sf

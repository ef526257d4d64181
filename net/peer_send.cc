// What an endpoint sends: one-way messages batched per turn into one call
// per method, large tensors streamed in pieces, requests and their replies
// (large replies as tells) (net/peer_link.h).
#include <cstring>
#include <type_traits>

#include "graph/tensor_proto.h"
#include "net/peer_link.h"

namespace sf {
namespace net {
namespace detail {

size_t TensorBytes(const Message& m) {
  size_t n = 0;
  auto add = [&](const Tensor& t) {
    if (t.valid()) n += t.bytes();
  };
  std::visit(
      [&](const auto& b) {
        using B = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<B, Echo>) add(b.payload);
        else if constexpr (std::is_same_v<B, RunPartitionDone>) for (const auto& t : b.fetches) add(t);
        else if constexpr (std::is_same_v<B, VariableValues>) for (const auto& t : b.values) add(t);
        else if constexpr (std::is_same_v<B, AssignVariables>) for (const auto& t : b.values) add(t);
        else if constexpr (std::is_same_v<B, ReplicateSlot>) for (const auto& t : b.values) add(t);
        else if constexpr (std::is_same_v<B, SendTensor>) add(b.value);
        else if constexpr (std::is_same_v<B, CollectiveChunk>) add(b.chunk);
      },
      m.body);
  return n;
}

void Core::SendOnLoop(uint64_t id, std::shared_ptr<Message> m) {
  Link* l = FindLink(id);
  if (!l || !l->hello_done) return;
  if (!std::holds_alternative<Heartbeat>(m->body)) l->last_used_ms = NowMs();
  // One call for what this turn sends (the inbox is drained in one go): a
  // call costs three RPC messages, a tensor of a burst should not. Big
  // tensors are not batched: the receiver reads a call whole.
  const size_t bytes = TensorBytes(*m) + 256;
  if (!l->outbox.empty() && l->outbox_bytes + bytes > kBatchBytes) Flush(id);
  l->outbox.push_back(std::move(m));
  l->outbox_bytes += bytes;
  if (l->flush_scheduled) return;
  l->flush_scheduled = true;
  l->tasks->add(kj::evalLater([this, id] { Flush(id); }));
}

namespace {

using Batch = std::vector<std::shared_ptr<Message>>;

// The method a one-way message goes by: replies to the peer's asks share
// one (Channel.replies), the rest one per body kind.
size_t TellKey(const Message& m) { return m.request_id != 0 ? ~size_t{0} : m.body.index(); }

template <class T, class List>
Status FillList(List list, const Batch& batch, size_t from) {
  for (unsigned k = 0; k < list.size(); ++k)
    SF_RETURN_IF_ERROR(EncodeStruct<T>(std::get<T>(batch[from + k]->body), list[k]));
  return Status::OK();
}

// Starts the one call carrying batch[from, from + n), all of one TellKey;
// its promise, or why it cannot be sent. Connection::Send checked the
// route against what the peer offers (fixed before the connection is up).
Result<kj::Promise<void>> TellCall(Link::Remote& r, const Batch& batch, size_t from, unsigned n) {
  const Message& first = *batch[from];
  if (first.request_id != 0) {
    auto req = r.channel.repliesRequest();
    auto list = req.initReplies(n);
    for (unsigned k = 0; k < n; ++k) SF_RETURN_IF_ERROR(EncodeEnvelope(*batch[from + k], list[k]));
    return kj::Promise<void>(req.send().ignoreResult());
  }
  using P = kj::Promise<void>;
  return std::visit(
      [&](const auto& b) -> Result<P> {
        using B = std::decay_t<decltype(b)>;
        // Fills the request's list (made by init) with the run and sends it.
        auto send = [&](auto req, auto init) -> Result<P> {
          SF_RETURN_IF_ERROR(FillList<B>(init(req), batch, from));
          return P(req.send().ignoreResult());
        };
        if constexpr (std::is_same_v<B, Heartbeat>) {
          return P(r.channel.heartbeatRequest().send().ignoreResult());
        } else if constexpr (std::is_same_v<B, StepProgress>) {
          return send(r.channel.progressRequest(), [n](auto& q) { return q.initReports(n); });
        } else if constexpr (std::is_same_v<B, AbortStep>) {
          return send(r.partitions.abortRequest(), [n](auto& q) { return q.initSteps(n); });
        } else if constexpr (std::is_same_v<B, CleanupStep>) {
          return send(r.partitions.cleanupRequest(), [n](auto& q) { return q.initSteps(n); });
        } else if constexpr (std::is_same_v<B, Membership>) {
          return send(r.channel.membersRequest(), [n](auto& q) { return q.initViews(n); });
        } else if constexpr (std::is_same_v<B, SendTensor>) {
          return send(r.rendezvous.sendRequest(), [n](auto& q) { return q.initTensors(n); });
        } else if constexpr (std::is_same_v<B, CollectiveChunk>) {
          return send(r.collectives.chunksRequest(), [n](auto& q) { return q.initChunks(n); });
        } else if constexpr (std::is_same_v<B, CollectiveAnnounce>) {
          return send(r.collectives.announceRequest(), [n](auto& q) { return q.initAnnouncements(n); });
        } else {
          return InvalidArgument(std::string(BodyName(first.body)) + " cannot be sent one-way");
        }
      },
      first.body);
}

// Streams one large SendTensor as pieces of kBatchBytes, each a call that
// references its slice of the tensor (the last is copied when it is not
// whole words); the promise of them all.
Result<kj::Promise<void>> PieceCalls(Link::Remote& r, const SendTensor& st) {
  const Tensor& v = st.value;
  const auto* base = static_cast<const capnp::byte*>(v.raw_data());
  const uint64_t total = v.bytes();
  kj::Vector<kj::Promise<void>> calls;
  for (uint64_t off = 0; off < total; off += kBatchBytes) {
    const uint64_t len = std::min<uint64_t>(kBatchBytes, total - off);
    auto req = r.rendezvous.sendPieceRequest();
    auto piece = req.initPiece();
    if (off == 0) {
      SendTensor header = st;
      header.value = Tensor();
      auto h = piece.initHeader();
      SF_RETURN_IF_ERROR(EncodeStruct<SendTensor>(header, h));
      auto value = h.initValue();
      value.setDtype(DTypeToProto(v.dtype()));
      auto shape = value.initShape(v.rank());
      for (int i = 0; i < v.rank(); ++i) shape.set(i, v.dim(i));
    }
    piece.setOffset(off);
    if (len % sizeof(capnp::word) == 0) {
      piece.adoptData(capnp::Orphanage::getForMessageContaining(piece).referenceExternalData(
          capnp::Data::Reader(base + off, len)));
    } else {
      auto d = piece.initData(static_cast<unsigned>(len));
      std::memcpy(d.begin(), base + off, len);
    }
    calls.add(req.send().ignoreResult());
  }
  return kj::joinPromises(calls.releaseAsArray());
}

// True for a message that goes as pieces (Rendezvous.sendPiece).
bool Streamed(const Message& m) {
  auto* st = std::get_if<SendTensor>(&m.body);
  return m.request_id == 0 && st && st->value.valid() && st->value.bytes() > kBatchBytes;
}

// Starts the call for request m (id rid) on the peer's service for it
// (Connection::Request checked the route); *bytes: its parameters' size.
Result<kj::Promise<capnp::Response<rp::Reply>>> AskCall(Link::Remote& r, const Message& m, uint64_t rid,
                                                        uint64_t* bytes) {
  using P = kj::Promise<capnp::Response<rp::Reply>>;
  return std::visit(
      [&](const auto& b) -> Result<P> {
        using B = std::decay_t<decltype(b)>;
        auto typed = [&](auto req) -> Result<P> {
          req.setId(rid);
          SF_RETURN_IF_ERROR(EncodeStruct<B>(b, req.initRequest()));
          *bytes = req.totalSize().wordCount * sizeof(capnp::word);
          return P(req.send());
        };
        if constexpr (std::is_same_v<B, RegisterPartition>) return typed(r.partitions.registerPartitionRequest());
        else if constexpr (std::is_same_v<B, RunPartition>) return typed(r.partitions.runRequest());
        else if constexpr (std::is_same_v<B, CloseSession>) return typed(r.partitions.closeSessionRequest());
        else if constexpr (std::is_same_v<B, ReadVariables>) return typed(r.variables.readVariablesRequest());
        else if constexpr (std::is_same_v<B, AssignVariables>) return typed(r.variables.assignVariablesRequest());
        else if constexpr (std::is_same_v<B, SaveShards>) return typed(r.variables.saveShardsRequest());
        else if constexpr (std::is_same_v<B, CommitShards>) return typed(r.variables.commitShardsRequest());
        else if constexpr (std::is_same_v<B, RestoreShards>) return typed(r.variables.restoreShardsRequest());
        else if constexpr (std::is_same_v<B, MoveSlot>) return typed(r.placement.moveSlotRequest());
        else if constexpr (std::is_same_v<B, SyncSlot>) return typed(r.placement.syncSlotRequest());
        else if constexpr (std::is_same_v<B, ReplicateSlot>) return typed(r.variables.replicateSlotRequest());
        else if constexpr (std::is_same_v<B, ListNamespaces>) return typed(r.variables.namespacesRequest());
        else if constexpr (std::is_same_v<B, DropNamespace>) return typed(r.variables.dropNamespaceRequest());
        else if constexpr (std::is_same_v<B, Echo>) return typed(r.diagnostics.echoRequest());
        else if constexpr (std::is_same_v<B, ListMembers>) {
          auto req = r.members.listRequest();
          req.setId(rid);
          return P(req.send());
        } else {
          return InvalidArgument(std::string(BodyName(m.body)) + " is not a request");
        }
      },
      m.body);
}

}  // namespace

void Core::Flush(uint64_t id) {
  Link* l = FindLink(id);
  if (!l) return;
  l->flush_scheduled = false;
  Batch out = std::move(l->outbox);
  l->outbox.clear();
  l->outbox_bytes = 0;
  size_t i = 0;
  while (i < out.size()) {
    // One call per run of one method, of at most kBatchBytes (or one
    // message). Every call goes now: asks are never held behind one-way
    // messages sent before them, and what a peer has not handled is
    // bounded by its flow limit (it stops reading) and our write deadline.
    size_t j = i + 1, bytes = TensorBytes(*out[i]) + 256;
    while (j < out.size() && TellKey(*out[j]) == TellKey(*out[i])) {
      const size_t b = TensorBytes(*out[j]) + 256;
      if (bytes + b > kBatchBytes) break;
      bytes += b;
      ++j;
    }
    auto batch = std::make_shared<Batch>(out.begin() + i, out.begin() + j);
    // A streamed tensor is alone in its run: it exceeds kBatchBytes.
    const Message& first = *(*batch)[0];
    auto call = Streamed(first) ? PieceCalls(l->services, std::get<SendTensor>(first.body))
                                : TellCall(l->services, *batch, 0, static_cast<unsigned>(batch->size()));
    if (!call.ok()) {
      Down(l, call.status().WithPrefix("sending a message"));
      return;
    }
    l->unanswered_bytes += bytes;
    // A run is all replies or none; ReplyOnLoop counted them when it queued them.
    const uint64_t replies = first.request_id != 0 ? bytes : 0;
    if (replies > 0) NoteReplyQueued(l, replies, /*queued=*/true);
    // The return proves the bytes left; until then the tensors must live.
    l->tasks->add(call->then(
        [this, id, batch, bytes, replies] {
          if (Link* l = FindLink(id)) {
            l->unanswered_bytes -= bytes;
            l->reply_tell_bytes -= replies;
          }
        },
        [this, id, batch](kj::Exception&& e) {
          if (Link* l = FindLink(id)) {
            for (auto& m : *batch) l->keepalive.push_back(m);
            Down(l, Unavailable(std::string("sending ") + BodyName((*batch)[0]->body) + " failed: " + Describe(e)));
          }
        }));
    i = j;
  }
}

void Core::ReplyOnLoop(uint64_t id, Message m) {
  Link* l = FindLink(id);
  if (!l) return;
  auto it = l->incoming.find(m.request_id);
  if (it == l->incoming.end()) return;  // not a request of this peer's, or answered
  Link::Incoming in = kj::mv(it->second);
  l->incoming.erase(it);
  l->last_used_ms = NowMs();
  // A reply that cannot be encoded takes the return path, which answers
  // with the error instead (a failed tell would drop the connection). So
  // does one past what the peer may leave unacknowledged (one reply of any
  // size, or up to its cap): a peer that reads our tells and never answers
  // them would otherwise hold their tensors here; copied into the return,
  // the reply is ours to forget once written, and what we owe in replies
  // holds the peer's reads until it is.
  const size_t tensor_bytes = TensorBytes(m);
  const bool room = l->reply_tell_bytes == 0 || l->reply_tell_bytes + tensor_bytes <= options.max_peer_buffer_bytes;
  if (in.asker_id != 0 && tensor_bytes >= kReplyByTellBytes && room && CheckEncodable(m).ok()) {
    // Large: the reply goes as a tell (referenced, kept alive until acked)
    // and the return only says so; the asker matches it by its own id.
    m.request_id = in.asker_id;
    l->reply_tell_bytes += tensor_bytes + 256;  // as Flush counts it
    SendOnLoop(id, std::make_shared<Message>(std::move(m)));
    Message marker;
    marker.request_id = kSentByTell;
    marker.body = Heartbeat{};
    in.fulfiller->fulfill(std::move(marker));
    return;
  }
  in.fulfiller->fulfill(std::move(m));
}

void Core::AskOnLoop(uint64_t id, uint64_t rid, std::shared_ptr<Message> m, int timeout_ms) {
  Link* l = FindLink(id);
  if (!l) return;  // its pending request was failed when it went down
  std::shared_ptr<ConnImpl> conn = l->conn;
  l->last_used_ms = NowMs();
  m->request_id = rid;  // a reply sent through our channel names it
  uint64_t bytes = 0;
  auto started = AskCall(l->services, *m, rid, &bytes);
  if (!started.ok()) {
    conn->Finish(rid, started.status().WithPrefix(std::string("encoding ") + BodyName(m->body)));
    return;
  }
  auto call = started->then(
      [this, conn, rid](capnp::Response<rp::Reply> r) {
        if (r.getByTell()) return;  // the reply comes through our channel (Finish runs from it)
        auto reply = DecodeEnvelope(r.getReply(), limits);
        if (!reply.ok()) {
          conn->Finish(rid, reply.status().WithPrefix("reply from " + conn->Who()));
          DownById(conn->id(), reply.status().WithPrefix("malformed reply"));
          return;
        }
        conn->Finish(rid, std::move(*reply));
      },
      [this, conn, rid, m](kj::Exception&& e) {
        if (Link* l = FindLink(conn->id())) l->keepalive.push_back(m);
        conn->Finish(rid, Unavailable(std::string(BodyName(m->body)) + " to " + conn->Who() + " failed: " + Describe(e)));
      });
  auto deadline = timer_->afterDelay(std::max(1, timeout_ms) * kj::MILLISECONDS).then([this, conn, rid, m] {
    if (Link* l = FindLink(conn->id())) l->keepalive.push_back(m);
    conn->Finish(rid, DeadlineExceeded(std::string("request ") + BodyName(m->body) + " to " + conn->Who() + " timed out"));
  });
  l->asked_bytes += bytes;
  l->tasks->add(call.exclusiveJoin(kj::mv(deadline)).attach(kj::defer([this, id, bytes] {
    if (Link* l = FindLink(id)) l->asked_bytes -= bytes;
  })));
}

}  // namespace detail
}  // namespace net
}  // namespace sf

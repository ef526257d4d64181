// net/wire.h: round trips of every message kind, and clear errors for
// frames a broken or hostile peer could send.
#include <catch2/catch.hpp>

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/orphan.h>
#include <capnp/serialize.h>

#include <cstring>
#include <string>
#include <vector>

#include "proto/messages.capnp.h"
#include "net/wire.h"
#include "net/wire_envelope.h"

using namespace sf;
using namespace sf::net;

namespace {

// A tensor of `dtype` and `shape` whose bytes are a pattern depending on `seed`.
Tensor Patterned(DType dtype, Shape shape, int seed) {
  Tensor t(dtype, std::move(shape));
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.bytes(); ++i) p[i] = static_cast<uint8_t>(i * 31 + seed);
  if (dtype == DType::kBool)
    for (size_t i = 0; i < t.bytes(); ++i) p[i] &= 1;
  return t;
}

// One tensor per interesting case: every dtype, scalars, empty tensors,
// the invalid tensor, and tensors big enough to be referenced (one of them
// not a whole number of 8-byte words).
std::vector<Tensor> TensorZoo() {
  std::vector<Tensor> z;
  int seed = 1;
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool, DType::kBFloat16,
                  DType::kFloat16, DType::kResource}) {
    z.push_back(Patterned(d, {}, seed++));
    z.push_back(Patterned(d, {3}, seed++));
    z.push_back(Patterned(d, {2, 3, 1}, seed++));
    z.push_back(Patterned(d, {0}, seed++));
    z.push_back(Patterned(d, {4, 0, 2}, seed++));
  }
  z.push_back(Tensor());
  z.push_back(Patterned(DType::kFloat32, {64, 64}, seed++));  // 16 KiB: referenced
  z.push_back(Patterned(DType::kBool, {4099}, seed++));       // referenced, ragged last word
  z.push_back(Patterned(DType::kFloat16, {2051}, seed++));    // referenced, ragged last word
  return z;
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || a.valid() != b.valid()) return false;
  return a.bytes() == b.bytes() && (a.bytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0);
}
bool SameTensors(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!SameTensor(a[i], b[i])) return false;
  return true;
}
bool SameStatus(const Status& a, const Status& b) { return a.code() == b.code() && a.message() == b.message(); }
bool SameRefs(const std::vector<OutputRef>& a, const std::vector<OutputRef>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].node != b[i].node || a[i].index != b[i].index) return false;
  return true;
}

bool Same(const Heartbeat&, const Heartbeat&) { return true; }
bool Same(const StatusReply& a, const StatusReply& b) { return SameStatus(a.status, b.status); }
bool Same(const ListMembers&, const ListMembers&) { return true; }
bool SameMembers(const std::vector<Member>& a, const std::vector<Member>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].address != b[i].address || a[i].incarnation != b[i].incarnation) return false;
  return true;
}
bool Same(const Membership& a, const Membership& b) {
  return SameMembers(a.members, b.members) && SameMembers(a.leaving, b.leaving) &&
         a.map_epoch == b.map_epoch && a.map_holder == b.map_holder && a.map_from == b.map_from &&
         a.map_slots == b.map_slots && a.map_lost_after == b.map_lost_after;
}
bool Same(const RegisterPartition& a, const RegisterPartition& b) {
  return a.session_id == b.session_id && a.handle == b.handle && a.device == b.device &&
         SameMembers(a.tasks, b.tasks) && a.graph_def == b.graph_def && SameRefs(a.feeds, b.feeds) &&
         SameRefs(a.fetches, b.fetches) && a.targets == b.targets && a.epoch == b.epoch;
}
bool Same(const RunPartition& a, const RunPartition& b) {
  return a.session_id == b.session_id && a.handle == b.handle && a.step_id == b.step_id &&
         SameTensors(a.feeds, b.feeds) && a.trace_max_events == b.trace_max_events &&
         a.progress_ms == b.progress_ms;
}
bool SameTrace(const TraceData& a, const TraceData& b) {
  if (a.threads != b.threads || a.dropped != b.dropped || a.events.size() != b.events.size()) return false;
  for (size_t i = 0; i < a.events.size(); ++i) {
    const TraceEvent &x = a.events[i], &y = b.events[i];
    if (x.name != y.name || x.op != y.op || x.category != y.category || x.thread != y.thread ||
        x.start_ns != y.start_ns || x.dur_ns != y.dur_ns)
      return false;
  }
  return true;
}
bool Same(const RunPartitionDone& a, const RunPartitionDone& b) {
  return a.step_id == b.step_id && SameStatus(a.status, b.status) && SameTensors(a.fetches, b.fetches) &&
         SameTrace(a.trace, b.trace) && a.trace_elapsed_ns == b.trace_elapsed_ns;
}
bool Same(const SendTensor& a, const SendTensor& b) {
  return a.step_id == b.step_id && a.edge == b.edge && a.frame == b.frame && a.iteration == b.iteration &&
         a.is_dead == b.is_dead && a.session_id == b.session_id && SameTensor(a.value, b.value);
}
bool Same(const AbortStep& a, const AbortStep& b) {
  return a.step_id == b.step_id && a.session_id == b.session_id && SameStatus(a.status, b.status);
}
bool Same(const CleanupStep& a, const CleanupStep& b) { return a.step_id == b.step_id && a.session_id == b.session_id; }
bool Same(const CloseSession& a, const CloseSession& b) { return a.session_id == b.session_id; }
bool Same(const StepProgress& a, const StepProgress& b) {
  return a.session_id == b.session_id && a.step_id == b.step_id && a.ops == b.ops;
}
bool Same(const Echo& a, const Echo& b) { return SameTensor(a.payload, b.payload); }
bool Same(const ReadVariables& a, const ReadVariables& b) { return a.names == b.names; }
bool Same(const VariableValues& a, const VariableValues& b) {
  return a.names == b.names && SameTensors(a.values, b.values);
}
bool Same(const AssignVariables& a, const AssignVariables& b) {
  return a.names == b.names && SameTensors(a.values, b.values);
}
bool Same(const CollectiveChunk& a, const CollectiveChunk& b) {
  return a.group_key == b.group_key && a.group_size == b.group_size && a.generation == b.generation &&
         a.from_rank == b.from_rank && a.step == b.step && a.total == b.total && a.address == b.address &&
         SameStatus(a.status, b.status) && SameTensor(a.chunk, b.chunk) && a.epoch == b.epoch;
}
bool Same(const CollectiveAnnounce& a, const CollectiveAnnounce& b) {
  return a.group_key == b.group_key && a.group_size == b.group_size && a.from_rank == b.from_rank &&
         a.address == b.address && a.epoch == b.epoch;
}

bool Same(const SaveShards& a, const SaveShards& b) {
  return a.dir == b.dir && a.token == b.token && a.task == b.task && a.global_step == b.global_step &&
         a.names == b.names && a.drop == b.drop;
}
bool Same(const CommitShards& a, const CommitShards& b) {
  return a.dir == b.dir && a.token == b.token && a.tasks == b.tasks && a.global_step == b.global_step &&
         a.keep_last == b.keep_last;
}
bool Same(const RestoreShards& a, const RestoreShards& b) {
  return a.dir == b.dir && a.token == b.token && a.id == b.id && a.task == b.task && a.names == b.names;
}
bool Same(const MoveSlot& a, const MoveSlot& b) { return a.slot == b.slot && a.to == b.to && a.epoch == b.epoch; }
bool Same(const SyncSlot& a, const SyncSlot& b) {
  return a.slot == b.slot && a.backup == b.backup && a.epoch == b.epoch;
}
bool Same(const ReplicateSlot& a, const ReplicateSlot& b) {
  return a.slot == b.slot && a.epoch == b.epoch && a.holder == b.holder && a.full == b.full && a.names == b.names &&
         SameTensors(a.values, b.values) && SameTensors(a.rows, b.rows) && SameTensors(a.origins, b.origins) &&
         a.leading == b.leading && a.round == b.round && a.more == b.more && a.counters == b.counters &&
         SameTensors(a.clocks, b.clocks);
}
bool Same(const ShardsDone& a, const ShardsDone& b) {
  return a.id == b.id && a.token == b.token && a.global_step == b.global_step && a.variables == b.variables &&
         a.bytes == b.bytes && a.dropped == b.dropped;
}

bool Same(const ListNamespaces&, const ListNamespaces&) { return true; }
bool Same(const DropNamespace& a, const DropNamespace& b) { return a.ns == b.ns; }
bool Same(const Namespaces& a, const Namespaces& b) {
  if (a.namespaces.size() != b.namespaces.size()) return false;
  for (size_t i = 0; i < a.namespaces.size(); ++i) {
    const NamespaceState &x = a.namespaces[i], &y = b.namespaces[i];
    if (x.ns != y.ns || x.variables != y.variables || x.tables != y.tables || x.queues != y.queues ||
        x.bytes != y.bytes || x.sessions != y.sessions)
      return false;
  }
  return true;
}

bool SameMessage(const Message& a, const Message& b) {
  if (a.request_id != b.request_id || a.body.index() != b.body.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        return Same(x, std::get<T>(b.body));
      },
      a.body);
}

// One message of every Body alternative, with non-default values everywhere.
std::vector<Message> EveryMessage() {
  const std::string bytes("\x00\x01\xff\x7f secret\x00", 12);
  std::vector<Message> out;
  uint64_t id = 1;
  auto add = [&](Body b) { out.push_back(Message{id++ * 0x1000000001ULL, std::move(b)}); };
  add(Heartbeat{});
  add(StatusReply{InvalidArgument("feed x has shape [2]")});
  add(StatusReply{Status::OK()});
  add(ListMembers{});
  add(Membership{{{"a", "127.0.0.1:1", 1}, {"b", "127.0.0.1:2", ~uint64_t{0}}, {"", ""}}, {{"c", "127.0.0.1:3", 7}}});
  add(RegisterPartition{7, 9, "/job:w/task:1/device:cpu:0", {{"w0", "127.0.0.1:1"}, {"w1", "127.0.0.1:2"}},
                        bytes + std::string(5000, 'g'), {{"x", 0}, {"y", 3}}, {{"loss", 1}},
                        {"train", "", "assign_1"}});
  add(RunPartition{7, 9, -42, TensorZoo()});
  add(RunPartition{7, 9, 42, {}, 3, 250});
  add(RunPartitionDone{-1, Aborted("step 3 aborted by node b"), TensorZoo()});
  {
    RunPartition traced{7, 9, 12, {}};
    traced.trace_max_events = 100000;
    add(traced);
    RunPartitionDone done{12, Status::OK(), {Patterned(DType::kFloat32, {2}, 1)}};
    done.trace.threads = {"thread 0", "thread 7"};
    done.trace.events = {{"MatMul", "MatMul", "op", 1, 1500, 2500},
                         {"w", "ReadVariable", "wait", 0, 0, 0},
                         {"partition /job:worker/task:1/device:CPU:0", "", "partition", 1, 10, 99999}};
    done.trace.dropped = 3;
    done.trace_elapsed_ns = 123456;
    add(done);
  }
  add(SendTensor{5, "a:0->b", "while/body", 17, true, Patterned(DType::kFloat32, {2, 2}, 3), 0xfeedULL});
  add(SendTensor{6, "", "", 0, false, Tensor()});
  add(AbortStep{8, DeadlineExceeded("node c silent for 1000 ms"), 0x1234567890abcdefULL});
  add(CleanupStep{-8, 77});
  add(CloseSession{~uint64_t{0}});
  add(StepProgress{5, -3, ~uint64_t{0}});
  add(Echo{Patterned(DType::kFloat64, {1000}, 9)});
  add(Echo{Tensor()});
  add(ReadVariables{{"emb/part_0", "", "w/Adagrad/accum"}});
  add(ReadVariables{});
  add(VariableValues{{"emb/part_0", "w/Adagrad/accum"}, {Patterned(DType::kFloat32, {4, 3}, 2), TensorZoo().back()}});
  add(VariableValues{});
  add(AssignVariables{{"emb/part_0", "w/Adagrad/accum"}, {Patterned(DType::kFloat32, {4, 3}, 2), Tensor()}});
  add(AssignVariables{});
  add(CollectiveChunk{"grads/w", 3, 7, 2, 3, 10, "127.0.0.1:7003", Status::OK(), Patterned(DType::kFloat32, {3}, 4)});
  add(CollectiveAnnounce{"g", 2, 1, "127.0.0.1:7002", 5});
  add(CollectiveChunk{"g", 4, 1, 0, 5, 8, "a:1", Unavailable("node b went down"), Tensor(), 3});
  add(SaveShards{"ckpt/run 1", ~uint64_t{0}, 3, -5, {"emb/part_0", "emb/part_0/Adagrad/accumulator", ""}, {1, 2}});
  add(SaveShards{});
  add(CommitShards{"ckpt", 0x1234567890abcdefULL, 6, 1000, 3});
  add(RestoreShards{"ckpt", 0, -1, 2, {"w", "w/Momentum"}});
  add(RestoreShards{"ckpt", 7, 12, 0, {}});
  add(ShardsDone{12, ~uint64_t{0}, 1000, 7, int64_t{5} << 40, {3, 4, ~uint64_t{0}}});
  add(ShardsDone{});
  add(MoveSlot{7, "127.0.0.1:7001", 123456789});
  add(SyncSlot{3, "127.0.0.1:7002", 99});
  add(ReplicateSlot{5, 77, "127.0.0.1:7003", true, {"emb/part_0", "w"},
                    {Patterned(DType::kFloat32, {2, 3}, 5), Patterned(DType::kFloat32, {4}, 6)},
                    {Patterned(DType::kInt64, {2}, 1), Tensor::Scalar<int64_t>(-1)},
                    {Patterned(DType::kInt64, {1, 2}, 2), Tensor(DType::kInt64, Shape{0, 2})}, {1000, -1},
                    0x123456789abcdefULL, true, {57, 114, 3, 58, -1, -1, -1, -1},
                    {Tensor::FromVector<int64_t>({4, int64_t{1} << 30}), Tensor(DType::kInt64, Shape{0})}});
  add(ReplicateSlot{});
  add(ListNamespaces{});
  add(DropNamespace{"team_a"});
  add(Namespaces{{{"default", 3, 1, 2, int64_t{5} << 40, 4}, {"team_a", 0, 0, 0, 0, 0}}});
  add(Namespaces{});
  {
    Membership m{{{"a", "127.0.0.1:1", 1}}, {}};
    m.map_epoch = 42;
    m.map_holder = {"127.0.0.1:1", "127.0.0.1:2"};
    m.map_from = {"", "127.0.0.1:1"};
    m.map_lost_after = {0, 17};
    m.map_slots = 2;
    add(m);
    RegisterPartition r{1, 2, "/job:worker/task:0/device:CPU:0", {}, "", {}, {}, {}};
    r.epoch = 42;
    add(r);
  }
  return out;
}

// A frame around a hand-built Cap'n Proto message.
std::string FrameOf(capnp::MessageBuilder& b) {
  auto flat = capnp::messageToFlatArray(b);
  std::string out(kFrameMagic, 4);
  const uint32_t n = static_cast<uint32_t>(flat.asBytes().size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  out.append(reinterpret_cast<const char*>(flat.asBytes().begin()), n);
  return out;
}

// A frame holding an Echo whose payload `fill` writes by hand.
template <typename F>
std::string EchoFrame(F fill) {
  capnp::MallocMessageBuilder b;
  auto env = b.initRoot<proto::wire::Envelope>();
  env.setVersion(kWireVersion);
  fill(env.getBody().initEcho().initPayload());
  return FrameOf(b);
}

}  // namespace

TEST_CASE("every message kind round-trips through a frame", "[wire]") {
  for (const Message& m : EveryMessage()) {
    INFO(BodyName(m.body));
    auto frame = EncodeToString(m);
    REQUIRE(frame.ok());
    auto back = DecodeFrameString(*frame);
    INFO(back.status().ToString());
    REQUIRE(back.ok());
    CHECK(SameMessage(m, *back));
    CHECK(std::string(BodyName(back->body)) == BodyName(m.body));
  }
}

TEST_CASE("BodyName names every alternative", "[wire]") {
  CHECK(std::string(BodyName(Body(Heartbeat{}))) == "Heartbeat");
  CHECK(std::string(BodyName(Body(RunPartitionDone{}))) == "RunPartitionDone");
  CHECK(std::string(BodyName(Body(Echo{}))) == "Echo");
  CHECK(EveryMessage().size() >= std::variant_size_v<Body>);
}

TEST_CASE("a frame's pieces add up and reference big tensors without copying", "[wire]") {
  Tensor big = Patterned(DType::kFloat32, {1 << 20}, 4);  // 4 MiB
  Message m{3, Echo{big}};
  auto f = EncodeFrame(m);
  REQUIRE(f.ok());
  uint64_t total = 0;
  bool references = false;
  for (const iovec& v : f->pieces()) {
    total += v.iov_len;
    if (v.iov_base == big.raw_data() && v.iov_len == big.bytes()) references = true;
  }
  CHECK(total == f->size());
  CHECK(references);
  CHECK(std::memcmp(f->pieces()[0].iov_base, kFrameMagic, 4) == 0);
  // Moving the frame keeps its pieces valid.
  Frame moved = std::move(*f);
  auto s = ParseFrameHeader(static_cast<const uint8_t*>(moved.pieces()[0].iov_base), WireLimits{});
  REQUIRE(s.ok());
  CHECK(*s + kFrameHeaderBytes == moved.size());
}

TEST_CASE("ragged referenced tensors are padded with zeros, not buffer bytes", "[wire]") {
  Tensor t = Patterned(DType::kBool, {5001}, 1);
  // Dirty the buffer's padding so a leak would show.
  std::memset(static_cast<uint8_t*>(t.raw_data()) + 5001, 0xAB, 7);
  auto frame = EncodeToString(Message{0, Echo{t}});
  REQUIRE(frame.ok());
  CHECK(frame->find(std::string(7, '\xAB')) == std::string::npos);
  auto back = DecodeFrameString(*frame);
  REQUIRE(back.ok());
  CHECK(SameTensor(std::get<Echo>(back->body).payload, t));
}

TEST_CASE("DecodeBody accepts an unaligned body", "[wire]") {
  auto frame = EncodeToString(EveryMessage()[11]);
  REQUIRE(frame.ok());
  std::vector<uint8_t> buf(frame->size() + 1);
  std::memcpy(buf.data() + 1, frame->data() + kFrameHeaderBytes, frame->size() - kFrameHeaderBytes);
  auto back = DecodeBody(buf.data() + 1, frame->size() - kFrameHeaderBytes);
  REQUIRE(back.ok());
  CHECK(SameMessage(*back, EveryMessage()[11]));
}

TEST_CASE("a peer of another wire version is refused by name", "[wire]") {
  capnp::MallocMessageBuilder b;
  auto env = b.initRoot<proto::wire::Envelope>();
  env.setVersion(kWireVersion + 1);
  env.getBody().initHeartbeat();
  auto r = DecodeFrameString(FrameOf(b));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kFailedPrecondition);
  CHECK(r.status().message() == "peer speaks wire version " + std::to_string(kWireVersion + 1) + ", this node speaks " + std::to_string(kWireVersion));
}

TEST_CASE("frame headers: bad magic, oversized and ragged bodies", "[wire]") {
  auto frame = EncodeToString(Message{1, Heartbeat{}});
  REQUIRE(frame.ok());
  std::string bad = *frame;
  bad[0] = 'H';  // an HTTP client, say
  auto r = DecodeFrameString(bad);
  CHECK(r.status().code() == Code::kDataLoss);
  CHECK(r.status().message().find("not a shardflow peer") != std::string::npos);

  uint8_t header[kFrameHeaderBytes];
  std::memcpy(header, kFrameMagic, 4);
  const uint32_t huge = (uint32_t{1} << 31) + 8;
  std::memcpy(header + 4, &huge, 4);
  auto h = ParseFrameHeader(header, WireLimits{});
  CHECK(h.status().code() == Code::kInvalidArgument);
  CHECK(h.status().message().find("exceeds the limit") != std::string::npos);
  WireLimits small;
  small.max_frame_bytes = 64;
  const uint32_t n72 = 72, n12 = 12, n64 = 64;
  std::memcpy(header + 4, &n72, 4);
  CHECK(ParseFrameHeader(header, small).status().code() == Code::kInvalidArgument);
  std::memcpy(header + 4, &n64, 4);
  CHECK(*ParseFrameHeader(header, small) == 64);
  std::memcpy(header + 4, &n12, 4);
  auto ragged = ParseFrameHeader(header, small);
  CHECK(ragged.status().code() == Code::kInvalidArgument);
  CHECK(ragged.status().message().find("multiple of 8") != std::string::npos);
  // DecodeBody enforces the limit too.
  CHECK(DecodeBody(reinterpret_cast<const uint8_t*>(frame->data()) + 8, frame->size() - 8, small).ok());
  small.max_frame_bytes = 8;
  CHECK(DecodeBody(reinterpret_cast<const uint8_t*>(frame->data()) + 8, frame->size() - 8, small)
            .status()
            .code() == Code::kInvalidArgument);
}

TEST_CASE("every truncation of a frame is refused", "[wire]") {
  Message m{77, SendTensor{5, "edge", "frame", 2, false, Patterned(DType::kInt32, {3, 2}, 5)}};
  auto frame = EncodeToString(m);
  REQUIRE(frame.ok());
  for (size_t len = 0; len < frame->size(); ++len) {
    INFO(len);
    auto r = DecodeFrameString(frame->substr(0, len));
    CHECK_FALSE(r.ok());
    CHECK(r.status().code() == Code::kDataLoss);
  }
  // Also bodies cut at a word boundary, given directly to DecodeBody with
  // their own (shorter) length, as a peer that lies in its header would.
  for (size_t words = 0; words * 8 < frame->size() - kFrameHeaderBytes; ++words) {
    std::vector<capnp::word> body(words + 1);
    std::memcpy(body.data(), frame->data() + kFrameHeaderBytes, words * 8);
    auto r = DecodeBody(reinterpret_cast<const uint8_t*>(body.data()), words * 8);
    INFO(words);
    CHECK(r.status().code() == Code::kDataLoss);
  }
  // Trailing bytes after the message are refused too.
  std::string longer = *frame + std::string(8, '\0');
  const uint32_t n = static_cast<uint32_t>(longer.size() - kFrameHeaderBytes);
  std::memcpy(&longer[4], &n, 4);
  CHECK(DecodeFrameString(longer).status().code() == Code::kDataLoss);
}

TEST_CASE("hand-built bad tensors get errors naming the field", "[wire]") {
  auto check = [](const std::string& frame, const std::string& needle) {
    auto r = DecodeFrameString(frame);
    INFO(r.status().ToString());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find("Echo.payload") != std::string::npos);
    CHECK(r.status().message().find(needle) != std::string::npos);
  };
  check(EchoFrame([](proto::Tensor::Builder t) { t.setDtype(static_cast<proto::DType>(99)); }),
        "unknown dtype enumerant 99");
  check(EchoFrame([](proto::Tensor::Builder t) {
          t.setDtype(proto::DType::FLOAT32);
          auto s = t.initShape(2);
          s.set(0, 2);
          s.set(1, -3);
          t.initData(0);
        }),
        "dimension -3 is negative");
  check(EchoFrame([](proto::Tensor::Builder t) {
          t.setDtype(proto::DType::FLOAT32);
          t.initShape(1).set(0, 3);
          t.initData(8);
        }),
        "3 elements of 4 bytes but 8 data bytes");
  check(EchoFrame([](proto::Tensor::Builder t) {
          t.setDtype(proto::DType::INT64);
          auto s = t.initShape(3);
          s.set(0, int64_t{1} << 40);
          s.set(1, int64_t{1} << 40);
          s.set(2, 0);
        }),
        "overflows");
  check(EchoFrame([](proto::Tensor::Builder t) {
          t.setDtype(proto::DType::INT64);
          t.initShape(1).set(0, int64_t{1} << 61);  // n * 8 wraps to 0 in 64 bits
        }),
        "data bytes");
  check(EchoFrame([](proto::Tensor::Builder t) {
          t.setDtype(proto::DType::INVALID);
          t.initShape(1).set(0, 1);
        }),
        "dtype invalid carries");
  check(EchoFrame([](proto::Tensor::Builder t) {
          t.setDtype(proto::DType::BOOL);
          t.initShape(33);
        }),
        "rank 33 exceeds");
}

TEST_CASE("bool bytes are normalised to 0 or 1", "[wire]") {
  auto frame = EchoFrame([](proto::Tensor::Builder t) {
    t.setDtype(proto::DType::BOOL);
    t.initShape(1).set(0, 3);
    auto d = t.initData(3);
    d[0] = 0;
    d[1] = 7;
    d[2] = 0xff;
  });
  auto r = DecodeFrameString(frame);
  REQUIRE(r.ok());
  const Tensor& t = std::get<Echo>(r->body).payload;
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  CHECK((p[0] == 0 && p[1] == 1 && p[2] == 1));
}

TEST_CASE("text, list and union limits are enforced by name", "[wire]") {
  WireLimits lim;
  lim.max_text_bytes = 8;
  lim.max_list_elements = 2;
  auto decode = [&](const Message& m) {
    auto f = EncodeToString(m);
    REQUIRE(f.ok());
    return DecodeFrameString(*f, lim).status();
  };
  Status s = decode(Message{1, CleanupStep{}});
  CHECK(s.ok());
  s = decode(Message{1, Membership{{{"a-very-long-node-name", "1"}}}});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("Membership.members[0].name") != std::string::npos);
  s = decode(Message{1, Membership{{{"a", "1"}, {"b", "2"}, {"c", "3"}}}});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("Membership.members has 3 elements") != std::string::npos);
  s = decode(Message{1, RegisterPartition{1, 2, "cpu", {}, std::string(100, 'g'), {}, {{"far-too-long", 0}}, {}}});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("RegisterPartition.fetches[0].node") != std::string::npos);
  s = decode(Message{1, RegisterPartition{1, 2, "cpu", {{"a", "b"}, {"c", "far-too-long"}}, "", {}, {}, {}}});
  CHECK(s.message().find("RegisterPartition.tasks[1].address") != std::string::npos);
  s = decode(Message{1, RegisterPartition{1, 2, "cpu", {}, "", {}, {}, {"a", "b", "c"}}});
  CHECK(s.message().find("RegisterPartition.targets has 3 elements") != std::string::npos);
  s = decode(Message{1, RunPartition{1, 2, 3, {Tensor(), Tensor(), Tensor()}}});
  CHECK(s.message().find("RunPartition.feeds has 3 elements") != std::string::npos);
  CHECK(decode(Message{1, CloseSession{}}).ok());
  CHECK(decode(Message{1, ReadVariables{{"12345678"}}}).ok());
  CHECK(decode(Message{1, ReadVariables{{"123456789"}}}).message().find("ReadVariables.names[0]") != std::string::npos);
  CHECK(decode(Message{1, ReadVariables{{"a", "b", "c"}}}).message().find("ReadVariables.names has 3 elements") !=
        std::string::npos);
  const std::vector<Tensor> three(3, Tensor::Scalar<float>(1.0f));
  CHECK(decode(Message{1, AssignVariables{{"a", "b", "c"}, three}}).message().find("AssignVariables.names has 3") !=
        std::string::npos);
  CHECK(decode(Message{1, VariableValues{{"a", "b", "c"}, three}}).message().find("VariableValues.names has 3") !=
        std::string::npos);
  CHECK(decode(Message{1, AssignVariables{{"w", "123456789"}, {three[0], three[1]}}}).message().find(
            "AssignVariables.names[1]") != std::string::npos);

  // An unknown union member (from a newer peer, or garbage).
  capnp::MallocMessageBuilder b;
  auto env = b.initRoot<proto::wire::Envelope>();
  env.setVersion(kWireVersion);
  env.getBody().initHeartbeat();
  auto data = b.getRoot<capnp::AnyStruct>().getDataSection();
  REQUIRE(data[4] == proto::wire::Envelope::Body::HEARTBEAT);  // the discriminant's offset
  data[4] = 99;
  auto r = DecodeFrameString(FrameOf(b));
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("unknown message kind 99") != std::string::npos);

  // An unknown status code.
  capnp::MallocMessageBuilder b2;
  auto env2 = b2.initRoot<proto::wire::Envelope>();
  env2.setVersion(kWireVersion);
  env2.getBody().initStatusReply().initStatus().setCode(1000);
  r = DecodeFrameString(FrameOf(b2));
  CHECK(r.status().message().find("StatusReply.status: unknown status code 1000") != std::string::npos);
}

TEST_CASE("values that cannot be encoded are refused by name", "[wire]") {
  Tensor odd(static_cast<DType>(42), {2});
  auto f = EncodeFrame(Message{1, SendTensor{1, "e", "", 0, false, odd}});
  CHECK(f.status().code() == Code::kInvalidArgument);
  CHECK(f.status().message().find("SendTensor.value: unknown dtype 42") != std::string::npos);

  // 512 MiB of bools: one byte over what a Data field holds. The buffer is
  // never touched, so the pages are not even mapped in.
  Tensor huge(DType::kBool, {int64_t{1} << 29});
  f = EncodeFrame(Message{1, RunPartition{1, 1, 1, {Tensor(), huge}}});
  CHECK(f.status().code() == Code::kInvalidArgument);
  CHECK(f.status().message().find("RunPartition.feeds[1]") != std::string::npos);
}

TEST_CASE("a frame of many referenced and copied tensors round-trips", "[wire]") {
  RunPartition rp{1, 2, 3, {}};
  for (int i = 0; i < 300; ++i) {
    rp.feeds.push_back(Patterned(DType::kInt32, {1024 + (i % 3)}, i));  // 4 KiB+: referenced
    rp.feeds.push_back(Patterned(DType::kFloat64, {i % 5}, i));         // small: copied
  }
  Message m{9, rp};
  auto f = EncodeFrame(m);
  REQUIRE(f.ok());
  CHECK(f->pieces().size() > 300);  // each big tensor is its own piece
  auto frame = EncodeToString(m);
  REQUIRE(frame.ok());
  auto back = DecodeFrameString(*frame);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(SameMessage(m, *back));
}

TEST_CASE("a message over 4 GiB is refused before anything is copied", "[wire]") {
  // Nine untouched 500 MiB tensors: referenced, never read, so no pages are mapped in.
  RunPartition rp{1, 2, 3, {}};
  for (int i = 0; i < 9; ++i) rp.feeds.push_back(Tensor(DType::kFloat32, {int64_t{125} << 20}));
  auto f = EncodeFrame(Message{1, rp});
  CHECK(f.status().code() == Code::kInvalidArgument);
  CHECK(f.status().message().find("RunPartition encodes to") != std::string::npos);
  CHECK(f.status().message().find("less than 4 GiB") != std::string::npos);
}

TEST_CASE("a node's trace naming a thread it does not list is refused by name", "[wire][trace]") {
  RunPartitionDone d{1, Status::OK(), {}};
  d.trace.threads = {"thread 0"};
  d.trace.events = {{"a", "Add", "op", 1, 0, 5}};  // thread 1 of 1
  auto frame = EncodeToString(Message{3, d});
  REQUIRE(frame.ok());
  auto back = DecodeFrameString(*frame);
  REQUIRE_FALSE(back.ok());
  CHECK(back.status().code() == Code::kInvalidArgument);
  CHECK(back.status().message().find("RunPartitionDone.trace.events[0]") != std::string::npos);
  d.trace.events = {{"a", "Add", "op", 0, 0, -5}};  // a negative duration
  frame = EncodeToString(Message{3, d});
  REQUIRE(frame.ok());
  back = DecodeFrameString(*frame);
  REQUIRE_FALSE(back.ok());
  CHECK(back.status().message().find("negative duration") != std::string::npos);
}

TEST_CASE("fields whose pointers alias one blob are refused before they are copied", "[wire]") {
  // Two values of an AssignVariables naming the same 64 KiB: a peer that
  // crafts such pointers makes a small message stand for any number of
  // copies (Cap'n Proto's traversal limit counts each pointer), so the
  // decoder refuses bytes it has already copied once.
  std::vector<uint64_t> blob(8192, 7);
  capnp::MallocMessageBuilder b;
  auto env = b.initRoot<proto::wire::Envelope>();
  env.setVersion(kWireVersion);
  auto vars = env.getBody().initAssignVariables();
  auto names = vars.initNames(2);
  names.set(0, "a");
  names.set(1, "b");
  auto values = vars.initValues(2);
  auto orphanage = capnp::Orphanage::getForMessageContaining(env);
  for (int i = 0; i < 2; ++i) {
    values[i].setDtype(proto::DType::INT64);
    values[i].initShape(1).set(0, static_cast<int64_t>(blob.size()));
    values[i].adoptData(orphanage.referenceExternalData(
        capnp::Data::Reader(reinterpret_cast<const uint8_t*>(blob.data()), blob.size() * 8)));
  }
  auto r = DecodeEnvelope(env.asReader());
  INFO(r.status().ToString());
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kDataLoss);
  CHECK(r.status().message().find("AssignVariables.values[1]") != std::string::npos);
  CHECK(r.status().message().find("aliased") != std::string::npos);

  // And two separate copies of the same bytes are fine.
  capnp::MallocMessageBuilder b3;
  auto env3 = b3.initRoot<proto::wire::Envelope>();
  env3.setVersion(kWireVersion);
  auto vars3 = env3.getBody().initVariableValues();
  vars3.initNames(2);
  auto values3 = vars3.initValues(2);
  for (int i = 0; i < 2; ++i) {
    values3[i].setDtype(proto::DType::INT64);
    values3[i].initShape(1).set(0, 4);
    values3[i].setData(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(blob.data()), 32));
  }
  CHECK(DecodeEnvelope(env3.asReader()).ok());
}

TEST_CASE("reads and assigns of variables carry one value per name, within the limits", "[wire][bad_input]") {
  // The sender learns at once that it pairs names and values wrongly.
  const Tensor one = Tensor::Scalar<float>(1.0f);
  auto f = EncodeFrame(Message{1, AssignVariables{{"a", "b"}, {one}}});
  CHECK(f.status().code() == Code::kInvalidArgument);
  CHECK(f.status().message().find("AssignVariables: 2 names but 1 values") != std::string::npos);
  f = EncodeFrame(Message{1, VariableValues{{"a"}, {one, one}}});
  CHECK(f.status().message().find("VariableValues: 1 names but 2 values") != std::string::npos);

  // A peer's mismatch is refused before either list is read: 100,000 names
  // and no value cost no name's copy.
  auto mismatched = [](unsigned names, unsigned values, bool assign) {
    capnp::MallocMessageBuilder b;
    auto env = b.initRoot<proto::wire::Envelope>();
    env.setVersion(kWireVersion);
    if (assign) {
      auto a = env.getBody().initAssignVariables();
      a.initNames(names);
      a.initValues(values);
    } else {
      auto v = env.getBody().initVariableValues();
      v.initNames(names);
      v.initValues(values);
    }
    return DecodeFrameString(FrameOf(b)).status();
  };
  Status s = mismatched(100000, 0, true);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("AssignVariables: 100000 names but 0 values") != std::string::npos);
  s = mismatched(1, 2, false);
  CHECK(s.message().find("VariableValues: 1 names but 2 values") != std::string::npos);
  CHECK(mismatched(2, 2, true).ok());

  // A value claiming more elements than its bytes hold is refused by name
  // before it is allocated (2^40 floats, no data).
  capnp::MallocMessageBuilder b;
  auto env = b.initRoot<proto::wire::Envelope>();
  env.setVersion(kWireVersion);
  auto a = env.getBody().initAssignVariables();
  a.initNames(1).set(0, "w");
  auto t = a.initValues(1)[0];
  t.setDtype(proto::DType::FLOAT32);
  t.initShape(1).set(0, int64_t{1} << 40);
  s = DecodeFrameString(FrameOf(b)).status();
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("AssignVariables.values[0]") != std::string::npos);

  // A read's reply is of its own kind: no field says which it is.
  auto back = DecodeFrameString(*EncodeToString(Message{5, VariableValues{{"w"}, {one}}}));
  REQUIRE(back.ok());
  CHECK(std::holds_alternative<VariableValues>(back->body));
}

TEST_CASE("a replication round's SSP clocks that do not fit its names are refused by name", "[wire][bad_input]") {
  auto decode = [](std::vector<Tensor> clocks) {
    ReplicateSlot r;
    r.names = {"w"};
    r.values = {Tensor::FromVector<float>({1.0f})};
    r.rows = {Tensor::Scalar<int64_t>(-1)};
    r.origins = {Tensor(DType::kInt64, Shape{0, 2})};
    r.leading = {-1};
    r.clocks = std::move(clocks);
    Message m;
    m.body = r;
    auto frame = EncodeToString(m);
    REQUIRE(frame.ok());
    return DecodeFrameString(*frame);
  };
  auto two = decode({Tensor::FromVector<int64_t>({1}), Tensor::FromVector<int64_t>({2})});
  REQUIRE_FALSE(two.ok());
  CHECK(two.status().code() == Code::kInvalidArgument);
  CHECK(two.status().message().find("2 clock lists for 1 names") != std::string::npos);
  auto floats = decode({Tensor::FromVector<float>({1.0f})});
  REQUIRE_FALSE(floats.ok());
  CHECK(floats.status().message().find("clocks must be int64") != std::string::npos);
  auto fine = decode({Tensor::FromVector<int64_t>({1, 2, 3})});
  REQUIRE(fine.ok());
}

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
#include "net/wire_decoder.h"
#include "net/wire_envelope.h"

namespace sf {
namespace net {

// The header's length field and tensor bytes are little-endian on the wire.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "net/wire assumes a little-endian host");

using namespace wire_detail;  // the codec's halves: net/wire_encoder.h, net/wire_decoder.h

const char* BodyName(const Body& b) {
  static const char* const kNames[] = {
      "Heartbeat",
      "StatusReply",   "ListMembers",  "Membership",  "RegisterPartition", "RunPartition", "RunPartitionDone",
      "SendTensor",    "AbortStep",    "CleanupStep", "CloseSession",     "Echo",
      "ReadVariables", "VariableValues", "AssignVariables", "CollectiveChunk", "StepProgress", "SaveShards",
      "CommitShards", "RestoreShards", "ShardsDone", "MoveSlot", "SyncSlot", "ReplicateSlot", "ListNamespaces", "DropNamespace", "Namespaces",
      "CollectiveAnnounce"};
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
Status DecodeStruct(typename WireOf<T>::Proto::Reader r, const WireLimits& limits, T* out,
                    const std::atomic<bool>* cancel) {
  try {
    Decoder dec{limits};
    dec.cancel = cancel;
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
  template Status DecodeStruct<T>(WireOf<T>::Proto::Reader, const WireLimits&, T*, const std::atomic<bool>*);
SF_WIRE_STRUCT(Membership)
SF_WIRE_STRUCT(RegisterPartition)
SF_WIRE_STRUCT(RunPartition)
SF_WIRE_STRUCT(SendTensor)
SF_WIRE_STRUCT(AbortStep)
SF_WIRE_STRUCT(CleanupStep)
SF_WIRE_STRUCT(StepProgress)
SF_WIRE_STRUCT(CloseSession)
SF_WIRE_STRUCT(Echo)
SF_WIRE_STRUCT(ReadVariables)
SF_WIRE_STRUCT(AssignVariables)
SF_WIRE_STRUCT(CollectiveChunk)
SF_WIRE_STRUCT(CollectiveAnnounce)
SF_WIRE_STRUCT(SaveShards)
SF_WIRE_STRUCT(CommitShards)
SF_WIRE_STRUCT(RestoreShards)
SF_WIRE_STRUCT(MoveSlot)
SF_WIRE_STRUCT(SyncSlot)
SF_WIRE_STRUCT(ReplicateSlot)
SF_WIRE_STRUCT(ListNamespaces)
SF_WIRE_STRUCT(DropNamespace)
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

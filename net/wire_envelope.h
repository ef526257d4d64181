// The Envelope form of net::Message for code that hands Cap'n Proto
// builders and readers over itself (the RPC connection, net/peer_send.cc and net/peer_services.cc):
// the same encoder and hostile-input-safe decoder as net/wire.h's frames.
// Thread-safety: free functions over values.
#pragma once

#include <atomic>

#include "proto/messages.capnp.h"
#include "net/wire.h"

namespace sf {
namespace net {

// The Cap'n Proto struct each message body is written as (WireOf<T>::Proto),
// and how the Envelope's union holds it: RPC methods take the struct
// itself as a parameter, frames and replies the Envelope.
template <class T>
struct WireOf;
#define SF_WIRE_OF(T)                                                                                   \
  template <>                                                                                           \
  struct WireOf<T> {                                                                                    \
    using Proto = proto::wire::T;                                                                       \
    static Proto::Builder Init(proto::wire::Envelope::Body::Builder e) { return e.init##T(); }          \
  };
SF_WIRE_OF(Heartbeat)
SF_WIRE_OF(StatusReply)
SF_WIRE_OF(ListMembers)
SF_WIRE_OF(Membership)
SF_WIRE_OF(RegisterPartition)
SF_WIRE_OF(RunPartition)
SF_WIRE_OF(RunPartitionDone)
SF_WIRE_OF(SendTensor)
SF_WIRE_OF(AbortStep)
SF_WIRE_OF(CleanupStep)
SF_WIRE_OF(StepProgress)
SF_WIRE_OF(CloseSession)
SF_WIRE_OF(Echo)
SF_WIRE_OF(ReadVariables)
SF_WIRE_OF(VariableValues)
SF_WIRE_OF(AssignVariables)
SF_WIRE_OF(CollectiveChunk)
SF_WIRE_OF(CollectiveAnnounce)
SF_WIRE_OF(SaveShards)
SF_WIRE_OF(CommitShards)
SF_WIRE_OF(RestoreShards)
SF_WIRE_OF(ShardsDone)
SF_WIRE_OF(MoveSlot)
SF_WIRE_OF(SyncSlot)
SF_WIRE_OF(ReplicateSlot)
SF_WIRE_OF(ListNamespaces)
SF_WIRE_OF(DropNamespace)
SF_WIRE_OF(Namespaces)
#undef SF_WIRE_OF

// Writes m into b, its struct as an RPC parameter, with EncodeEnvelope's
// tensor referencing and errors (never throws).
template <class T>
Status EncodeStruct(const T& m, typename WireOf<T>::Proto::Builder b, bool reference_tensors = true);
// Reads r into *out with DecodeEnvelope's checks and errors (never throws).
// A decode given `cancel` stops with Aborted soon after it is set (its
// bytes are about to go).
template <class T>
Status DecodeStruct(typename WireOf<T>::Proto::Reader r, const WireLimits& limits, T* out,
                    const std::atomic<bool>* cancel = nullptr);

// The first piece of a SendTensor streamed in pieces (proto/peer.capnp's
// Rendezvous.sendPiece): the message without its value, and the value's
// dtype, shape and byte count, checked as a tensor's are; its value must
// hold no data. InvalidArgument naming the field, DataLoss for malformed
// input; never throws.
Status DecodeStreamedHeader(proto::wire::SendTensor::Reader r, const WireLimits& limits, SendTensor* out,
                            DType* dtype, Shape* shape, uint64_t* bytes);

// Writes m into env (version kWireVersion). With reference_tensors, tensors
// of 4 KiB or more whose size is whole words are referenced, not copied: m
// must then outlive env's message. InvalidArgument naming the field when a
// value cannot be encoded.
Status EncodeEnvelope(const Message& m, proto::wire::Envelope::Builder env, bool reference_tensors = true);

// EncodeEnvelope's errors for m, without keeping the encoding (so a caller
// learns at once that a message can never be sent).
Status CheckEncodable(const Message& m);

// Decodes env with DecodeBody's checks and errors (DataLoss for malformed
// input, FailedPrecondition naming both versions, InvalidArgument naming an
// out-of-limit field); never throws.
Result<Message> DecodeEnvelope(proto::wire::Envelope::Reader env, const WireLimits& limits = {});

}  // namespace net
}  // namespace sf

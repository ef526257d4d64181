// The Envelope form of net::Message for code that hands Cap'n Proto
// builders and readers over itself (the RPC connection, net/peer_rpc.cc):
// the same encoder and hostile-input-safe decoder as net/wire.h's frames.
// Thread-safety: free functions over values.
#pragma once

#include "net/messages.capnp.h"
#include "net/wire.h"

namespace sf {
namespace net {

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

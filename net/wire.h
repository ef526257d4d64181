// Wire form of net::Message: length-prefixed frames holding one Cap'n Proto
// Envelope (proto/messages.capnp).
//
// A frame is an 8-byte header (the magic "SFW1", then the body length as a
// little-endian u32) followed by the body: a standard Cap'n Proto message
// (segment table, then segments), always a multiple of 8 bytes.
//
// Encoding does not copy large tensors: their buffers become segments of the
// message and are written straight from the tensor with writev. Decoding is
// hostile-input safe: every size, count, dtype and shape is checked against
// WireLimits before anything is allocated, and Cap'n Proto exceptions are
// turned into Status values.
// Thread-safety: free functions over values; a Frame is not shared.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/messages.h"
#include "shardflow/status.h"

namespace sf {
namespace net {

// What a decoder accepts from a peer; each field's default is beside it.
struct WireLimits {
  uint64_t max_frame_bytes = uint64_t{1} << 31;    // a larger frame is refused before allocation
  uint32_t max_rank = 32;                          // tensor rank
  uint64_t max_list_elements = uint64_t{1} << 24;  // members, feeds, fetches, dims
  uint64_t max_text_bytes = uint64_t{1} << 20;     // names, keys, messages (graph_def is bounded by the frame)
};

// magic (4 bytes) + body length (u32 little-endian, bytes).
constexpr size_t kFrameHeaderBytes = 8;
// The first four bytes of every frame.
constexpr char kFrameMagic[4] = {'S', 'F', 'W', '1'};

// Reads a frame header: the body length in bytes; DataLoss when the magic is
// wrong ("not a shardflow peer"), InvalidArgument when the body exceeds
// limits.max_frame_bytes or is not a multiple of 8.
Result<uint64_t> ParseFrameHeader(const uint8_t* header, const WireLimits& limits);

// An encoded message ready to write with writev: header + Cap'n Proto
// segments. Tensor bytes are referenced, not copied, so the Message given to
// EncodeFrame must outlive the Frame. Movable; the pieces stay valid across
// moves.
class Frame {
 public:
  Frame();
  ~Frame();
  Frame(Frame&&) noexcept;
  Frame& operator=(Frame&&) noexcept;
  // The pieces to write in order, header first.
  const std::vector<iovec>& pieces() const;
  // Total bytes, header included.
  uint64_t size() const;

  struct State;  // the Cap'n Proto builder and the header bytes (wire.cc)

 private:
  friend Result<Frame> EncodeFrame(const Message& m);
  std::unique_ptr<State> state_;
};

// Encodes m (version kWireVersion); InvalidArgument naming the field when a
// value cannot be encoded (a tensor over 512 MiB, a frame over 4 GiB, an
// invalid dtype).
Result<Frame> EncodeFrame(const Message& m);

// Decodes one frame body (the bytes after the header; `size` bytes; copied
// first when `body` is not 8-byte aligned). Never throws, never crashes,
// never allocates more than the limits allow: DataLoss for garbage or
// truncated bytes, FailedPrecondition "peer speaks wire version X, this node
// speaks Y", InvalidArgument naming the field for out-of-limit sizes, bad
// dtypes, shapes whose element count overflows or disagrees with the data
// size, negative dims, unknown union members. Tensors are copied into fresh
// Tensor buffers.
Result<Message> DecodeBody(const uint8_t* body, uint64_t size, const WireLimits& limits = {});

// The whole frame (header and body) as one string, for tests and fuzzing;
// the errors of EncodeFrame.
Result<std::string> EncodeToString(const Message& m);
// Decodes a whole frame held in one string: the errors of ParseFrameHeader
// and DecodeBody, and DataLoss when the string is shorter or longer than the
// header says.
Result<Message> DecodeFrameString(const std::string& frame, const WireLimits& limits = {});

}  // namespace net
}  // namespace sf

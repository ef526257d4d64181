// A kj stream that records a peer's progress (bytes read and written, a
// message under way and its rate), so an endpoint's loop can tell a silent
// peer, a slow message and a peer that stopped reading (net/peer_rpc.h).
//
// Thread-safety: the endpoint's event-loop thread only, like the stream.
#pragma once

#include <kj/async-io.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace sf {
namespace net {

// Milliseconds on the steady clock.
inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Forwards to the TLS (or plain) stream and records progress, so the loop
// can tell a silent peer, a slow message and a peer that stopped reading.
// Large reads and writes go in pieces, each one stamping progress.
class Meter final : public kj::AsyncIoStream {
 public:
  explicit Meter(kj::Own<kj::AsyncIoStream> inner) : inner_(kj::mv(inner)) {
    last_read_ms = last_write_ms = NowMs();
  }

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override {
    // Held between messages (never inside one, where the rate rule would
    // count the pause against the peer) while it owes too much: see HoldReads.
    if (hold_ && hold_()) {
      auto paf = kj::newPromiseAndFulfiller<void>();
      resume_ = kj::mv(paf.fulfiller);
      held_since_ms = NowMs();
      return paf.promise.then([this, buffer, minBytes, maxBytes] {
        held_since_ms = 0;
        held_until_ms = NowMs();
        return tryRead(buffer, minBytes, maxBytes);
      });
    }
    // Cap'n Proto reads a message's first word alone and then its body with
    // minBytes = the body's size: that is a message under way.
    if (minBytes <= 8) return inner_->tryRead(buffer, minBytes, maxBytes).then([this](size_t n) {
      if (n > 0) last_read_ms = NowMs();
      return n;
    });
    frame_start_ms = window_start_ms = NowMs();
    frame_bytes = window_bytes = 0;
    in_frame = true;
    return ReadAtLeast(static_cast<kj::byte*>(buffer), minBytes, maxBytes, 0);
  }

  kj::Promise<void> write(const void* buffer, size_t size) override {
    kj::ArrayPtr<const kj::byte> one(static_cast<const kj::byte*>(buffer), size);
    auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>(1);
    pieces[0] = one;
    return WritePieces(kj::mv(pieces));
  }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    return WritePieces(kj::heapArray(pieces));
  }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }

  // Reads of the peer's next message wait while hold() is true (the bytes
  // we owe it are past its cap): the peer cannot add to them faster than it
  // takes them. Rechecked after each write of ours and by Recheck.
  void HoldReads(std::function<bool()> hold) { hold_ = std::move(hold); }
  // Lets a held read go on once hold() is false (after the caller shrank
  // what the peer is owed).
  void Recheck() {
    if (resume_.get() && !hold_()) {
      auto f = kj::mv(resume_);
      f->fulfill();
    }
  }
  // Whether the next message's read is held.
  bool Held() const { return resume_.get() != nullptr; }

  // Milliseconds the pending write has made no progress (0: none pending).
  int64_t WriteStalledMs(int64_t now) const { return writing > 0 ? now - last_write_ms : 0; }
  // When the peer last showed it is alive: the last bytes read from it, the
  // last progress of a write under way, or, after a long message of ours,
  // the time the peer may spend taking it in (decoding it holds the peer's
  // loop: 0.3 s for 256 MiB here, past a heartbeat; kDigestBytesPerMs).
  int64_t HeardMs() const {
    return std::max({last_read_ms, writing > 0 ? last_write_ms : int64_t{0},
                     long_write_end_ms + static_cast<int64_t>(long_write_bytes / kDigestBytesPerMs)});
  }
  // True when a message under way arrived slower than min_rate bytes/s over
  // the last window of a second or more (the window then starts again). A
  // rate since the message began would let a peer send most of a big
  // message fast and trickle the rest, holding its memory for minutes.
  bool SlowFrame(int64_t now, uint64_t min_rate) {
    if (!in_frame) return false;
    const int64_t ms = now - window_start_ms;
    if (ms <= 1000) return false;
    const bool slow = window_bytes * 1000 / static_cast<uint64_t>(ms) < min_rate;
    window_start_ms = now;
    window_bytes = 0;
    return slow;
  }
  // Bytes of the message under way received so far (0: none under way).
  uint64_t FrameBytesHeld() const { return in_frame ? frame_bytes : 0; }

  int64_t last_read_ms = 0;
  int64_t last_write_ms = 0;
  int64_t long_write_end_ms = 0;  // when the last write of more than kChunk bytes ended
  uint64_t long_write_bytes = 0;  // and its size
  int writing = 0;
  bool in_frame = false;
  int64_t frame_start_ms = 0;
  uint64_t frame_bytes = 0;
  int64_t window_start_ms = 0;  // the rate window (SlowFrame)
  uint64_t window_bytes = 0;
  int64_t held_since_ms = 0;  // when the read now held began to wait (0: none held)
  int64_t held_until_ms = 0;  // when the last held read went on
  uint64_t written = 0;       // bytes written in all

 private:
  static constexpr size_t kChunk = size_t{1} << 20;
  // How fast a peer is assumed to take in a message once it has its bytes
  // (decode and copy; a slow machine under load): 64 MB/s.
  static constexpr uint64_t kDigestBytesPerMs = 64 * 1000;

  kj::Promise<size_t> ReadAtLeast(kj::byte* buf, size_t min, size_t max, size_t got) {
    return inner_->tryRead(buf + got, 1, max - got).then([this, buf, min, max, got](size_t n) -> kj::Promise<size_t> {
      const size_t total = got + n;
      if (n > 0) {
        last_read_ms = NowMs();
        frame_bytes += n;
        window_bytes += n;
      }
      if (n == 0 || total >= min) {
        in_frame = false;
        return total;
      }
      return ReadAtLeast(buf, min, max, total);
    });
  }

  kj::Promise<void> WritePieces(kj::Array<kj::ArrayPtr<const kj::byte>> pieces) {
    ++writing;
    last_write_ms = NowMs();
    uint64_t bytes = 0;
    for (const auto& p : pieces) bytes += p.size();
    auto done = kj::defer([this, bytes] {
      --writing;
      last_write_ms = NowMs();
      if (bytes > kChunk) {
        long_write_end_ms = last_write_ms;
        long_write_bytes = bytes;
      }
    });
    return WriteFrom(kj::mv(pieces), 0, 0).attach(kj::mv(done));
  }

  // Writes pieces[i] from offset on, at most kChunk bytes per write.
  kj::Promise<void> WriteFrom(kj::Array<kj::ArrayPtr<const kj::byte>> pieces, size_t i, size_t offset) {
    std::vector<kj::ArrayPtr<const kj::byte>> chunk;
    size_t bytes = 0;
    while (i < pieces.size() && bytes < kChunk) {
      auto p = pieces[i];
      const size_t take = std::min(p.size() - offset, kChunk - bytes);
      if (take > 0) chunk.push_back(p.slice(offset, offset + take));
      bytes += take;
      offset += take;
      if (offset == p.size()) {
        ++i;
        offset = 0;
      }
    }
    if (chunk.empty()) return kj::READY_NOW;
    auto arr = kj::heapArray<kj::ArrayPtr<const kj::byte>>(chunk.data(), chunk.size());
    auto view = arr.asPtr();
    return inner_->write(view).attach(kj::mv(arr)).then(
        [this, pieces = kj::mv(pieces), i, offset, bytes]() mutable -> kj::Promise<void> {
          last_write_ms = NowMs();
          written += bytes;
          if (resume_.get()) RecheckSoon();
          return WriteFrom(kj::mv(pieces), i, offset);
        });
  }

  // Recheck once the writer above (Cap'n Proto) has counted the bytes this
  // write took off its queue: its continuation runs after ours.
  void RecheckSoon() {
    if (recheck_queued_) return;
    recheck_queued_ = true;
    rechecks_.add(kj::evalLater([this] {
      recheck_queued_ = false;
      Recheck();
    }));
  }
  struct IgnoreErrors final : public kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&&) override {}
  };

  kj::Own<kj::AsyncIoStream> inner_;
  std::function<bool()> hold_;
  kj::Own<kj::PromiseFulfiller<void>> resume_;  // a held read's (null: none held)
  bool recheck_queued_ = false;
  IgnoreErrors ignore_;
  kj::TaskSet rechecks_{ignore_};  // last: destroyed first, before what its tasks use
};

}  // namespace net
}  // namespace sf

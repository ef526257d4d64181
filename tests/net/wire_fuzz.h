// The wire decoder's mutation fuzz loop, shared by the Catch test
// (tests/net/wire_fuzz_test.cc) and the AddressSanitizer driver
// (tests/net/fuzz_driver_asan.cc, see docs/TESTING.md).
//
// Seeds are valid frames of every message kind; each input is one seed
// mutated by byte flips, truncation, insertion, deletion, length-field and
// segment-table edits, pointer-word overwrites, splicing two frames, or pure
// garbage. Every input goes through ParseFrameHeader and DecodeBody; a
// decoded message must hold self-consistent tensors and re-encode to a frame
// that decodes to the same bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "net/wire.h"

namespace sf {
namespace net {
namespace fuzz {

struct FuzzStats {
  uint64_t inputs = 0;
  uint64_t decoded = 0;   // inputs that decoded to a message
  uint64_t rejected = 0;  // inputs refused with an error Status
  uint64_t header_rejected = 0;        // of which: no header, or ParseFrameHeader refused it
  uint64_t rejected_by_code[16] = {};  // the others (DecodeBody refused them), by sf::Code
  std::string failure;    // the first broken invariant; empty when none
};

// A small tensor of dtype d and shape s with patterned bytes.
inline Tensor SeedTensor(DType d, Shape s, int seed) {
  Tensor t(d, std::move(s));
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.bytes(); ++i) p[i] = static_cast<uint8_t>(d == DType::kBool ? (i + seed) & 1 : i * 7 + seed);
  return t;
}

// One small message of every kind (and a referenced 4 KiB tensor, so
// multi-segment frames are mutated too).
inline std::vector<Message> SeedMessages() {
  std::vector<Message> m;
  uint64_t id = 1;
  auto add = [&](Body b) { m.push_back(Message{id++, std::move(b)}); };
  add(Heartbeat{});
  add(StatusReply{InvalidArgument("bad feed")});
  add(ListMembers{});
  add(Membership{{{"a", "127.0.0.1:1"}, {"b", "127.0.0.1:2"}}, {{"b", "127.0.0.1:2", 9}}});
  add(RegisterPartition{1, 2, "/job:w/task:0/device:cpu:0", {{"w0", "127.0.0.1:1"}}, "graphdefbytes", {{"x", 0}},
                        {{"y", 1}, {"z", 0}}, {"train"}});
  add(RunPartition{1, 2, 3,
                   {SeedTensor(DType::kFloat32, {2, 3}, 1), SeedTensor(DType::kInt64, {}, 2), Tensor(),
                    SeedTensor(DType::kBool, {5}, 3), SeedTensor(DType::kFloat16, {0, 4}, 4)},
                   0, 250});
  add(RunPartitionDone{3, Status::OK(),
                       {SeedTensor(DType::kFloat64, {2}, 5), SeedTensor(DType::kInt32, {1, 1, 3}, 6)}});
  add(SendTensor{4, "a:0->b", "", 0, false, SeedTensor(DType::kBFloat16, {3}, 7)});
  add(AbortStep{5, Aborted("step aborted")});
  add(CleanupStep{6});
  add(CloseSession{7});
  add(StepProgress{7, 8, 1234});
  add(Echo{SeedTensor(DType::kFloat32, {1024}, 8)});
  add(CollectiveChunk{"grads", 3, 2, 1, 2, 9, "127.0.0.1:7002", Status::OK(), SeedTensor(DType::kFloat64, {3}, 11)});
  add(CollectiveAnnounce{"grads", 3, 2, "127.0.0.1:7002", 1});
  add(ReadVariables{{"w", "emb/part_1"}});
  add(VariableValues{{"w"}, {SeedTensor(DType::kFloat32, {2, 2}, 9)}});
  add(AssignVariables{{"w", "emb/part_1"}, {SeedTensor(DType::kFloat32, {2, 2}, 9), SeedTensor(DType::kInt64, {3}, 10)}});
  return m;
}

// "" when every tensor of m is self-consistent, else what is wrong.
inline std::string CheckTensor(const Tensor& t) {
  if (!t.valid()) return t.rank() == 0 && t.raw_data() == nullptr ? "" : "invalid tensor with a shape or buffer";
  if (t.num_elements() != NumElements(t.shape())) return "element count differs from shape " + ShapeString(t.shape());
  for (int64_t d : t.shape())
    if (d < 0) return "negative dimension in " + ShapeString(t.shape());
  if (t.bytes() != static_cast<size_t>(t.num_elements()) * DTypeSize(t.dtype())) return "byte size mismatch";
  if (t.raw_data() == nullptr) return "valid tensor without a buffer";
  if (t.dtype() == DType::kBool) {
    const auto* p = static_cast<const uint8_t*>(t.raw_data());
    for (int64_t i = 0; i < t.num_elements(); ++i)
      if (p[i] > 1) return "bool byte other than 0 or 1";
  }
  return "";
}

inline std::string CheckMessage(const Message& m) {
  std::vector<const Tensor*> ts;
  if (auto* b = std::get_if<RunPartition>(&m.body)) for (const auto& t : b->feeds) ts.push_back(&t);
  if (auto* b = std::get_if<RunPartitionDone>(&m.body)) for (const auto& t : b->fetches) ts.push_back(&t);
  if (auto* b = std::get_if<SendTensor>(&m.body)) ts.push_back(&b->value);
  if (auto* b = std::get_if<Echo>(&m.body)) ts.push_back(&b->payload);
  if (auto* b = std::get_if<CollectiveChunk>(&m.body)) ts.push_back(&b->chunk);
  if (auto* b = std::get_if<VariableValues>(&m.body)) for (const auto& t : b->values) ts.push_back(&t);
  if (auto* b = std::get_if<AssignVariables>(&m.body)) for (const auto& t : b->values) ts.push_back(&t);
  for (const Tensor* t : ts) {
    std::string e = CheckTensor(*t);
    if (!e.empty()) return std::string(BodyName(m.body)) + ": " + e;
  }
  return "";
}

// Runs one input through ParseFrameHeader and DecodeBody as a reader would:
// the body is what follows the header, at most the length it declares.
inline void RunOne(const std::string& input, std::vector<uint64_t>& scratch, FuzzStats& stats) {
  ++stats.inputs;
  auto reject = [&](Code c) {
    ++stats.rejected;
    ++stats.rejected_by_code[static_cast<int>(c) & 15];
  };
  auto n = input.size() < kFrameHeaderBytes
               ? Result<uint64_t>(DataLoss("short"))
               : ParseFrameHeader(reinterpret_cast<const uint8_t*>(input.data()), WireLimits{});
  if (!n.ok()) {
    ++stats.rejected;
    ++stats.header_rejected;
    return;
  }
  const uint64_t avail = input.size() - kFrameHeaderBytes;
  const uint64_t len = std::min<uint64_t>(*n, avail);
  // An exact-size aligned copy, so AddressSanitizer sees any read past it.
  scratch.assign((len + 7) / 8, 0);
  if (len > 0) std::memcpy(scratch.data(), input.data() + kFrameHeaderBytes, len);
  auto m = DecodeBody(reinterpret_cast<const uint8_t*>(scratch.data()), len);
  if (!m.ok()) return reject(m.status().code());
  ++stats.decoded;
  if (!stats.failure.empty()) return;
  std::string bad = CheckMessage(*m);
  if (!bad.empty()) {
    stats.failure = bad;
    return;
  }
  // What decodes must re-encode, and decode again to the same frame.
  auto again = EncodeToString(*m);
  if (!again.ok()) {
    stats.failure = "decoded " + std::string(BodyName(m->body)) + " does not re-encode: " + again.status().ToString();
    return;
  }
  auto twice = DecodeFrameString(*again);
  if (!twice.ok()) {
    stats.failure = "re-encoded " + std::string(BodyName(m->body)) + " does not decode: " + twice.status().ToString();
    return;
  }
  auto thrice = EncodeToString(*twice);
  if (!thrice.ok() || *thrice != *again)
    stats.failure = "re-encoding " + std::string(BodyName(m->body)) + " is unstable";
}

// "header 1234, DataLoss 123, InvalidArgument 45": the rejections.
inline std::string RejectionSummary(const FuzzStats& s) {
  std::string out = "header " + std::to_string(s.header_rejected);
  for (int c = 0; c < 16; ++c)
    if (s.rejected_by_code[c] > 0)
      out += ", " + std::string(CodeName(static_cast<Code>(c))) + " " +
             std::to_string(s.rejected_by_code[c]);
  return out;
}

// Runs `iterations` mutated inputs from seed `seed`.
inline FuzzStats RunWireFuzz(uint64_t seed, uint64_t iterations) {
  FuzzStats stats;
  std::vector<std::string> frames;
  for (const Message& m : SeedMessages()) {
    auto f = EncodeToString(m);
    if (!f.ok()) {
      stats.failure = "seed " + std::string(BodyName(m.body)) + " does not encode: " + f.status().ToString();
      return stats;
    }
    frames.push_back(std::move(*f));
  }
  std::mt19937_64 rng(seed);
  auto below = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  static const uint64_t kInteresting[] = {0, 1, 7, 8, 0xff, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff,
                                          0xfffffffc, uint64_t{1} << 29, uint64_t{1} << 32, ~uint64_t{0},
                                          0x8000000000000000ULL};
  std::vector<uint64_t> scratch;
  std::string in;
  for (uint64_t it = 0; it < iterations; ++it) {
    in = frames[below(frames.size())];
    const int rounds = 1 + static_cast<int>(below(3));
    for (int r = 0; r < rounds; ++r) {
      switch (below(9)) {
        case 0: {  // flip a few bytes
          const int k = 1 + static_cast<int>(below(8));
          for (int i = 0; i < k && !in.empty(); ++i) in[below(in.size())] ^= static_cast<char>(1 + below(255));
          break;
        }
        case 1:  // truncate
          in.resize(below(in.size() + 1));
          break;
        case 2: {  // insert random bytes
          std::string ins(1 + below(16), '\0');
          for (char& c : ins) c = static_cast<char>(rng());
          in.insert(below(in.size() + 1), ins);
          break;
        }
        case 3:  // delete a range
          if (!in.empty()) {
            const size_t at = below(in.size());
            in.erase(at, 1 + below(std::min<size_t>(in.size() - at, 32)));
          }
          break;
        case 4:  // edit the header's length or a segment-table entry
          if (in.size() >= 16) {
            const size_t at = 4 + 4 * below(std::min<size_t>((in.size() - 4) / 4, 6));
            uint32_t v;
            std::memcpy(&v, &in[at], 4);
            const uint64_t pick = below(4);
            v = pick == 0 ? static_cast<uint32_t>(kInteresting[below(sizeof(kInteresting) / 8)])
                : pick == 1 ? v + 8 * static_cast<uint32_t>(below(5)) - 16
                : pick == 2 ? v + static_cast<uint32_t>(below(3)) - 1
                            : static_cast<uint32_t>(rng());
            std::memcpy(&in[at], &v, 4);
          }
          break;
        case 5:  // overwrite an aligned word (often a Cap'n Proto pointer)
          if (in.size() >= 16) {
            const size_t at = 8 * (1 + below(in.size() / 8 - 1));
            const uint64_t v = below(2) ? kInteresting[below(sizeof(kInteresting) / 8)] : rng();
            std::memcpy(&in[at], &v, std::min<size_t>(8, in.size() - at));
          }
          break;
        case 6: {  // splice: a prefix of this frame and a suffix of another
          const std::string& other = frames[below(frames.size())];
          in = in.substr(0, below(in.size() + 1)) + other.substr(below(other.size() + 1));
          break;
        }
        case 7: {  // garbage, sometimes behind a well-formed header
          std::string g(below(257), '\0');
          for (char& c : g) c = static_cast<char>(rng());
          if (below(2)) {
            g.resize(g.size() & ~size_t{7});
            const uint32_t n = static_cast<uint32_t>(g.size());
            g = std::string(kFrameMagic, 4) + std::string(reinterpret_cast<const char*>(&n), 4) + g;
          }
          in = std::move(g);
          break;
        }
        default: {  // change one 32-bit field to an interesting value
          if (in.size() >= 12) {
            const size_t at = 8 + 4 * below((in.size() - 8) / 4);
            const uint32_t v = static_cast<uint32_t>(kInteresting[below(sizeof(kInteresting) / 8)]);
            std::memcpy(&in[at], &v, 4);
          }
          break;
        }
      }
    }
    RunOne(in, scratch, stats);
    if (!stats.failure.empty()) {
      stats.failure += " (iteration " + std::to_string(it) + ")";
      return stats;
    }
  }
  return stats;
}

}  // namespace fuzz
}  // namespace net
}  // namespace sf

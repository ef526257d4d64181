// Wire encode/decode cost of a big tensor message (net/wire.h), against one
// memcpy of the same bytes.
//
//   build/bin/bench_wire            # 64 MiB float32 Echo, median of 7 runs
//   build/bin/bench_wire --mib 256 --json
//
// encode: EncodeFrame (the tensor is referenced, not copied: it should take
// microseconds whatever the size). decode: DecodeBody of the contiguous body
// as a receiver holds it after reading the frame (one copy into a fresh
// tensor buffer, plus the checks). memcpy: std::memcpy of the tensor's bytes
// into a fresh buffer, the floor for a decode that must own its bytes.
// --cold skips KeepTensorMemoryWarm, so both pay a page fault per 4 KiB.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "net/wire.h"

using namespace sf;
using namespace sf::examples;

namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_wire: %s\n", what.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("mib", 64, "tensor size in MiB (float32)")
      .Int("reps", 7, "timed runs (median reported), after one warm-up")
      .Bool("cold", "do not call KeepTensorMemoryWarm (every tensor maps fresh pages)")
      .Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_wire");
  // A node process keeps freed tensor memory, as a Session does.
  if (!flags.GetBool("cold")) KeepTensorMemoryWarm();
  const int64_t bytes = flags.GetInt("mib") << 20;
  const int reps = static_cast<int>(std::max<int64_t>(1, flags.GetInt("reps")));
  Tensor t = Tensor::Zeros(DType::kFloat32, {bytes / 4});
  net::Message m{1, net::Echo{t}};

  // The body as a receiver holds it: contiguous and 8-byte aligned.
  auto frame = net::EncodeToString(m);
  if (!frame.ok()) Die(frame.status().ToString());
  const uint64_t body_bytes = frame->size() - net::kFrameHeaderBytes;
  std::vector<uint64_t> body(body_bytes / 8);
  std::memcpy(body.data(), frame->data() + net::kFrameHeaderBytes, body_bytes);

  std::vector<double> enc, dec, cpy;
  for (int r = 0; r <= reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    auto f = net::EncodeFrame(m);
    const double e = Seconds(t0);
    if (!f.ok()) Die(f.status().ToString());

    t0 = std::chrono::steady_clock::now();
    auto d = net::DecodeBody(reinterpret_cast<const uint8_t*>(body.data()), body_bytes);
    const double dd = Seconds(t0);
    if (!d.ok()) Die(d.status().ToString());

    t0 = std::chrono::steady_clock::now();
    Tensor copy(DType::kFloat32, t.shape());
    std::memcpy(copy.raw_data(), t.raw_data(), t.bytes());
    const double c = Seconds(t0);
    if (r == 0) continue;  // warm-up
    enc.push_back(e);
    dec.push_back(dd);
    cpy.push_back(c);
  }
  const double e = Median(enc), d = Median(dec), c = Median(cpy);
  const double gb = static_cast<double>(bytes) / 1e9;
  if (flags.GetBool("json")) {
    JsonLine().Add("case", "encode").Add("bytes", bytes).Add("ms", e * 1e3).Add("gb_per_sec", gb / e).Print();
    JsonLine().Add("case", "decode").Add("bytes", bytes).Add("ms", d * 1e3).Add("gb_per_sec", gb / d).Print();
    JsonLine().Add("case", "memcpy").Add("bytes", bytes).Add("ms", c * 1e3).Add("gb_per_sec", gb / c).Print();
    JsonLine().Add("summary", "bench_wire").Add("bytes", bytes).Add("encode_ms", e * 1e3)
        .Add("decode_ms", d * 1e3).Add("memcpy_ms", c * 1e3).Add("decode_over_memcpy", d / c)
        .Add("warm", !flags.GetBool("cold")).Print();
  } else {
    std::printf("%lld MiB float32 Echo, median of %d\n", static_cast<long long>(bytes >> 20), reps);
    std::printf("encode %.3f ms   decode %.2f ms (%.2f GB/s)   memcpy %.2f ms (%.2f GB/s)\n", e * 1e3, d * 1e3,
                gb / d, c * 1e3, gb / c);
  }
  return 0;
}

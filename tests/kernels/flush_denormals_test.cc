// FlushDenormalsToZero: the calling thread and the threads it starts later
// read and write denormals as zero. Run on a thread of its own, so the rest of
// this test process keeps the default floating-point mode.
#include <catch2/catch.hpp>

#include <thread>

#include "shardflow/precision.h"

namespace {

// A denormal float through arithmetic the compiler cannot fold.
float Denormal() {
  volatile float tiny = 1e-39f;
  volatile float one = 1.0f;
  return tiny * one;
}

}  // namespace

TEST_CASE("FlushDenormalsToZero holds on the calling thread and the threads it starts", "[kernels][denormals]") {
  float before = -1, after = -1, child = -1;
  std::thread t([&] {
    before = Denormal();
    sf::FlushDenormalsToZero();
    after = Denormal();
    std::thread c([&] { child = Denormal(); });
    c.join();
  });
  t.join();
  CHECK(before > 0.0f);
#if defined(__x86_64__) || defined(__i386__)
  CHECK(after == 0.0f);
  CHECK(child == 0.0f);
#endif
  CHECK(Denormal() > 0.0f);  // this thread keeps the default mode
}

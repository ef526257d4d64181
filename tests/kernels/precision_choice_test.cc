// PrecisionChoice (kernels/cpu/precision_choice.h) on a fake clock: each
// shape runs bf16 first, then alternates until both precisions have their
// trials, keeps the faster for good, and a failed run counts for nothing.
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/cpu/precision_choice.h"

using namespace sf;
using nn::Precision;

namespace {

// A clock that only moves when a fake product runs: bf16 and fp32 take the
// given nanoseconds.
struct FakeProducts {
  int64_t now = 0;
  int64_t bf16_ns, fp32_ns;
  std::vector<Precision> ran;
  nn::PrecisionChoice::Clock Clock() {
    return [this] { return now; };
  }
  std::function<Status(Precision)> Run() {
    return [this](Precision p) {
      ran.push_back(p);
      now += p == Precision::kBf16 ? bf16_ns : fp32_ns;
      return Status::OK();
    };
  }
};

}  // namespace

TEST_CASE("PrecisionChoice keeps fp32 where bf16 is slower, and bf16 where it is faster", "[kernels][bf16]") {
  for (bool bf16_faster : {false, true}) {
    INFO("bf16 faster: " << bf16_faster);
    FakeProducts f{0, bf16_faster ? 100 : 300, 200, {}};
    nn::PrecisionChoice choice(f.Clock(), 3);
    const std::vector<int64_t> shape = {128, 512, 784};
    for (int i = 0; i < 6; ++i) {
      CHECK(choice.Decided(shape) == nullptr);
      REQUIRE(choice.Run(shape, f.Run()).ok());
    }
    // bf16 first (what was asked for), then alternating.
    CHECK(f.ran == std::vector<Precision>{Precision::kBf16, Precision::kFp32, Precision::kBf16, Precision::kFp32,
                                          Precision::kBf16, Precision::kFp32});
    const Precision want = bf16_faster ? Precision::kBf16 : Precision::kFp32;
    REQUIRE(choice.Decided(shape) != nullptr);
    CHECK(*choice.Decided(shape) == want);
    f.ran.clear();
    for (int i = 0; i < 5; ++i) REQUIRE(choice.Run(shape, f.Run()).ok());
    CHECK(f.ran == std::vector<Precision>(5, want));
    // Another shape is measured afresh.
    CHECK(choice.Decided({1, 2, 3}) == nullptr);
  }
}

TEST_CASE("PrecisionChoice judges each precision by its fastest run", "[kernels][bf16]") {
  // bf16's first run builds its plans (slow); after it bf16 is faster.
  int64_t now = 0;
  int bf16_runs = 0;
  nn::PrecisionChoice choice([&] { return now; }, 2);
  auto run = [&](Precision p) {
    if (p == Precision::kBf16) now += bf16_runs++ == 0 ? 10'000 : 50;
    else now += 80;
    return Status::OK();
  };
  for (int i = 0; i < 4; ++i) REQUIRE(choice.Run({7}, run).ok());
  REQUIRE(choice.Decided({7}) != nullptr);
  CHECK(*choice.Decided({7}) == Precision::kBf16);
}

TEST_CASE("PrecisionChoice passes a failed run's error on and does not count it", "[kernels][bf16]") {
  int64_t now = 0;
  nn::PrecisionChoice choice([&] { return now; }, 1);
  int calls = 0;
  Status s = choice.Run({1}, [&](Precision p) {
    ++calls;
    CHECK(p == Precision::kBf16);
    return Internal("oneDNN failed");
  });
  CHECK(s.code() == Code::kInternal);
  CHECK(choice.Decided({1}) == nullptr);
  // Still bf16's turn: the failed run was not counted.
  REQUIRE(choice.Run({1}, [&](Precision p) {
    CHECK(p == Precision::kBf16);
    now += 5;
    return Status::OK();
  }).ok());
  REQUIRE(choice.Run({1}, [&](Precision p) {
    CHECK(p == Precision::kFp32);
    now += 1;
    return Status::OK();
  }).ok());
  REQUIRE(choice.Decided({1}) != nullptr);
  CHECK(*choice.Decided({1}) == Precision::kFp32);
}

TEST_CASE("PrecisionChoice measures a bounded number of shapes; later ones run bf16 unmeasured", "[kernels][bf16]") {
  int64_t now = 0;
  nn::PrecisionChoice choice([&] { return now; }, 1);
  auto fp32_faster = [&](Precision p) {
    now += p == Precision::kBf16 ? 10 : 1;
    return Status::OK();
  };
  for (int64_t s = 0; s < static_cast<int64_t>(nn::PrecisionChoice::kMaxShapes); ++s)
    for (int i = 0; i < 2; ++i) REQUIRE(choice.Run({s}, fp32_faster).ok());
  CHECK(*choice.Decided({0}) == Precision::kFp32);
  const std::vector<int64_t> late = {-1};
  for (int i = 0; i < 4; ++i)
    REQUIRE(choice.Run(late, [](Precision p) {
      CHECK(p == Precision::kBf16);
      return Status::OK();
    }).ok());
  CHECK(choice.Decided(late) == nullptr);
}

#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "runtime/step_join.h"

using namespace sf;

TEST_CASE("StepJoin: fetches land in step order; the cause beats the Aborted it caused; abort once, cleanup before done",
          "[runtime]") {
  std::vector<std::string> events;
  Result<std::vector<Tensor>> result = Internal("not done");
  SECTION("all succeed") {
    runtime::StepJoin join(2, 3, [&](Result<std::vector<Tensor>> r) { events.push_back("done"); result = std::move(r); },
                           [&](const Status&) { events.push_back("abort"); }, [&] { events.push_back("cleanup"); });
    join.Report(Status::OK(), {Tensor::Scalar<int32_t>(2)}, {2});
    CHECK(events.empty());
    join.Report(Status::OK(), {Tensor::Scalar<int32_t>(0), Tensor::Scalar<int32_t>(1)}, {0, 1});
    REQUIRE(result.ok());
    CHECK((*result)[0].scalar_as<int>() == 0);
    CHECK((*result)[2].scalar_as<int>() == 2);
    CHECK(events == std::vector<std::string>{"cleanup", "done"});
  }
  SECTION("an Aborted first, then the real cause") {
    runtime::StepJoin join(3, 0, [&](Result<std::vector<Tensor>> r) { events.push_back("done"); result = std::move(r); },
                           [&](const Status& s) { events.push_back("abort:" + s.message()); },
                           [&] { events.push_back("cleanup"); });
    join.Report(Aborted("step aborted"), {}, {});
    join.Report(InvalidArgument("node 'r' (op Reshape): bad shape"), {}, {});
    join.Report(Aborted("step aborted"), {}, {});
    REQUIRE(!result.ok());
    CHECK(result.status().code() == Code::kInvalidArgument);
    CHECK(events == std::vector<std::string>{"abort:step aborted", "cleanup", "done"});
  }
  SECTION("a partition returning the wrong number of fetches is an internal error") {
    runtime::StepJoin join(1, 1, [&](Result<std::vector<Tensor>> r) { result = std::move(r); }, nullptr, nullptr);
    join.Report(Status::OK(), {}, {0});
    REQUIRE(!result.ok());
    CHECK(result.status().code() == Code::kInternal);
  }
}

TEST_CASE("StepJoin: many partitions reporting at once finish the step exactly once", "[runtime]") {
  constexpr int kParts = 64;
  std::atomic<int> done{0}, aborts{0}, cleanups{0};
  Status final_status;
  runtime::StepJoin join(kParts, 0, [&](Result<std::vector<Tensor>> r) { final_status = r.status(); ++done; },
                         [&](const Status&) { ++aborts; }, [&] { ++cleanups; });
  std::vector<std::thread> threads;
  for (int i = 0; i < kParts; ++i)
    threads.emplace_back([&join, i] { join.Report(i % 7 == 3 ? Unavailable("member gone") : Status::OK(), {}, {}); });
  for (auto& t : threads) t.join();
  CHECK(done == 1);
  CHECK(aborts == 1);
  CHECK(cleanups == 1);
  CHECK(final_status.code() == Code::kUnavailable);
}

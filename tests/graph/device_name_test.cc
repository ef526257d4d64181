#include <catch2/catch.hpp>

#include "graph/device_name.h"

using namespace sf;

namespace {
bool HasText(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }
}  // namespace

TEST_CASE("Full device names parse and print canonically", "[placement]") {
  auto d = ParseDeviceName("/job:worker/task:3/device:GPU:1");
  REQUIRE(d.ok());
  CHECK(d->fully_defined());
  CHECK(d->job == "worker");
  CHECK(d->task == 3);
  CHECK(d->type == "GPU");
  CHECK(d->id == 1);
  CHECK(d->ToString() == "/job:worker/task:3/device:GPU:1");
  CHECK(*CanonicalDeviceName("/job:ps/task:0/device:cpu:0") == "/job:ps/task:0/device:CPU:0");
  CHECK(*CanonicalDeviceName("/job:ps/task:0/cpu:2") == "/job:ps/task:0/device:CPU:2");
}

TEST_CASE("Partial names leave missing fields as wildcards", "[placement]") {
  CHECK(*CanonicalDeviceName("") == "");
  CHECK(*CanonicalDeviceName("/cpu:0") == "/device:CPU:0");
  CHECK(*CanonicalDeviceName("/GPU:1") == "/device:GPU:1");
  CHECK(*CanonicalDeviceName("/job:ps") == "/job:ps");
  CHECK(*CanonicalDeviceName("/task:2") == "/task:2");
  CHECK(*CanonicalDeviceName("/job:*/task:*/device:GPU:*") == "/device:GPU:*");
  CHECK(*CanonicalDeviceName("/device:CPU") == "/device:CPU:*");
  auto d = ParseDeviceName("/job:ps");
  CHECK_FALSE(d->fully_defined());
  CHECK_FALSE(d->has_task);
}

TEST_CASE("Bad device names are errors quoting the text", "[placement]") {
  for (const char* bad : {"job:w", "/job:w//task:0", "/job:1w", "/task:x", "/task:-1", "/device:TPU:0",
                          "/device:CPU:a", "/replica:0", "/job:a/job:b", "/cpu:0/gpu:0", "/job:w/"}) {
    auto r = ParseDeviceName(bad);
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(HasText(r.status(), std::string("'") + bad + "'"));
  }
  CHECK(HasText(ParseDeviceName("/device:TPU:0").status(), "'TPU' is not CPU or GPU"));
  CHECK(HasText(ParseDeviceName("/replica:0").status(), "unknown part 'replica:0'"));
  auto partial = ParseFullDeviceName("/job:w/device:CPU:0");
  REQUIRE_FALSE(partial.ok());
  CHECK(HasText(partial.status(), "the task is missing"));
  CHECK(ParseFullDeviceName("/job:w/task:0/cpu:0").ok());
}

TEST_CASE("A partial name matches the full names that agree on its fields", "[placement]") {
  auto full = *ParseDeviceName("/job:worker/task:1/device:CPU:0");
  CHECK(DeviceNameMatches(*ParseDeviceName(""), full));
  CHECK(DeviceNameMatches(*ParseDeviceName("/job:worker"), full));
  CHECK(DeviceNameMatches(*ParseDeviceName("/task:1/cpu:0"), full));
  CHECK(DeviceNameMatches(*ParseDeviceName("/device:CPU:*"), full));
  CHECK_FALSE(DeviceNameMatches(*ParseDeviceName("/job:ps"), full));
  CHECK_FALSE(DeviceNameMatches(*ParseDeviceName("/task:0"), full));
  CHECK_FALSE(DeviceNameMatches(*ParseDeviceName("/gpu:0"), full));
  CHECK_FALSE(DeviceNameMatches(*ParseDeviceName("/cpu:1"), full));
}

TEST_CASE("Merging partial names combines fields and names both on a conflict", "[placement]") {
  auto m = MergeDeviceNames(*ParseDeviceName("/job:ps"), *ParseDeviceName("/task:1/cpu:0"));
  REQUIRE(m.ok());
  CHECK(m->ToString() == "/job:ps/task:1/device:CPU:0");
  CHECK(MergeDeviceNames(*ParseDeviceName("/job:ps"), *ParseDeviceName("/job:ps/task:0"))->ToString() ==
        "/job:ps/task:0");
  auto c = MergeDeviceNames(*ParseDeviceName("/job:ps/cpu:0"), *ParseDeviceName("/job:worker"));
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kInvalidArgument);
  CHECK(HasText(c.status(), "'/job:ps/device:CPU:0'"));
  CHECK(HasText(c.status(), "'/job:worker'"));
  CHECK(HasText(c.status(), "jobs"));
  CHECK_FALSE(MergeDeviceNames(*ParseDeviceName("/cpu:0"), *ParseDeviceName("/gpu:0")).ok());
  CHECK_FALSE(MergeDeviceNames(*ParseDeviceName("/cpu:0"), *ParseDeviceName("/cpu:1")).ok());
}

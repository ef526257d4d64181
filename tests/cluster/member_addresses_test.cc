// MemberAddresses: an address etcd listed stays known after it left (the
// latest max_known), a current member always is, a registration's wait
// ends when etcd lists the address, at its deadline, or at Close.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>

#include "cluster/member_addresses.h"

using namespace sf;
using namespace std::chrono_literals;
using cluster::MemberAddresses;
using cluster::MemberRecord;

namespace {

MemberRecord At(const std::string& address) { return MemberRecord{"n-" + address, address, false, 1, 1}; }
std::chrono::steady_clock::time_point In(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

}  // namespace

TEST_CASE("MemberAddresses: a member that left stays known, the oldest forgotten past the bound", "[member_addresses]") {
  MemberAddresses addresses(2);
  CHECK(addresses.Latest().empty());
  CHECK(!addresses.Knows("a:1"));
  addresses.Update({At("a:1"), At("b:1")});
  addresses.Update({At("b:1")});  // a:1 left: still known (a step sending to it fails as to a down node)
  CHECK(addresses.Knows("a:1"));
  CHECK(addresses.Latest().size() == 1);
  addresses.Update({At("b:1"), At("c:1")});  // past the bound: the oldest, a:1, goes
  CHECK(!addresses.Knows("a:1"));
  CHECK(addresses.Knows("b:1"));
  CHECK(addresses.Knows("c:1"));
  addresses.Update({At("d:1"), At("e:1"), At("f:1")});  // more current members than the bound: all known
  for (const char* a : {"d:1", "e:1", "f:1"}) CHECK(addresses.Knows(a));
}

TEST_CASE("MemberAddresses: a wait ends when etcd lists the address, at its deadline, or at Close", "[member_addresses]") {
  MemberAddresses addresses;
  CHECK(!addresses.WaitKnown("a:1", In(-1ms)));  // a deadline passed: at once
  auto waiting = std::async(std::launch::async, [&] { return addresses.WaitKnown("a:1", In(30s)); });
  addresses.Update({At("b:1")});
  CHECK(waiting.wait_for(50ms) == std::future_status::timeout);  // another address: still waiting
  addresses.Update({At("a:1")});
  REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
  CHECK(waiting.get());

  auto closed = std::async(std::launch::async, [&] { return addresses.WaitKnown("z:1", In(30s)); });
  addresses.Close();
  REQUIRE(closed.wait_for(10s) == std::future_status::ready);
  CHECK(!closed.get());
  CHECK(!addresses.WaitKnown("z:1", In(30s)));  // after Close: at once
}

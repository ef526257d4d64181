// One etcd per test process (sf::LocalEtcd on TestTlsDir()), started on
// first use and stopped at exit: for tests that start cluster nodes in
// their own process. Each test case runs in its own process under ctest.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "shardflow/cluster.h"
#include "tests/support/test_credentials.h"

namespace sf::testing {

// Its client address "127.0.0.1:PORT"; throws (failing the test) when etcd cannot start.
inline const std::string& TestEtcd() {
  static std::unique_ptr<LocalEtcd> etcd = [] {
    auto e = LocalEtcd::Start(TestTlsDir());
    if (!e.ok()) throw std::runtime_error("test etcd: " + e.status().ToString());
    return std::move(*e);
  }();
  return etcd->endpoint();
}

}  // namespace sf::testing

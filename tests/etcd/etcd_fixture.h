// Test helpers for tests/etcd/: one cluster CA per test process (the one
// InitCredentials makes, so "node" and "session" exist), a real etcd started
// on it with TLS, and clients with tight timeouts so that a failure shows in
// seconds.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "cluster/etcd_client.h"
#include "cluster/etcd_process.h"
#include "net/credentials.h"
#include "tests/support/test_credentials.h"

namespace sf::testing {

// The test process's credentials directory (tests/support/test_credentials.h).
inline const std::string& EtcdTlsDir() { return TestTlsDir(); }

// A started etcd on EtcdTlsDir(); the test fails (with etcd's log) when it does not start.
inline std::unique_ptr<cluster::EtcdProcess> StartEtcd() {
  cluster::EtcdProcessOptions o;
  o.credentials_dir = EtcdTlsDir();
  auto p = std::make_unique<cluster::EtcdProcess>(o);
  const Status s = p->Start();
  INFO(s.ToString());
  REQUIRE(s.ok());
  return p;
}

// Options for a client of endpoints with credential `name` from dir.
inline cluster::EtcdClientOptions ClientOptions(const std::string& endpoints, const std::string& name = "node",
                                                const std::string& dir = EtcdTlsDir()) {
  auto cred = net::LoadCredential(dir, name);
  INFO(cred.status().ToString());
  REQUIRE(cred.ok());
  cluster::EtcdClientOptions o;
  o.endpoints = endpoints;
  o.credential = *cred;
  o.request_timeout = std::chrono::milliseconds(2000);
  o.retry_interval = std::chrono::milliseconds(50);
  return o;
}

inline std::unique_ptr<cluster::EtcdClient> MakeClient(const cluster::EtcdClientOptions& o) {
  auto c = cluster::EtcdClient::Create(o);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return std::move(*c);
}

// A client of etcd as "node".
inline std::unique_ptr<cluster::EtcdClient> Connect(const cluster::EtcdProcess& etcd) {
  return MakeClient(ClientOptions(etcd.endpoint()));
}

}  // namespace sf::testing

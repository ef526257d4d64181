// One cluster CA with "node" and "session" credentials per test process,
// made on first use in a temporary directory and removed at exit: for
// tests that start nodes or sessions (net/credentials.h).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "net/credentials.h"

namespace sf::testing {

// The directory; throws (failing the test) when it cannot be made.
inline const std::string& TestTlsDir() {
  static const std::string dir = [] {
    auto d = net::MakeTemporaryCredentials();
    if (!d.ok()) throw std::runtime_error("test credentials: " + d.status().ToString());
    static std::string path = *d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    });
    return *d;
  }();
  return dir;
}

}  // namespace sf::testing

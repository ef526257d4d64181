// Test helpers for files: a temporary directory removed with the test, and
// writing raw bytes to a file.
#pragma once

#include <catch2/catch.hpp>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace sf::testing {

// A fresh directory under /tmp named after `tag`, removed with the object.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& tag = "sf_test") {
    std::string tmpl = "/tmp/" + tag + "_XXXXXX";
    const char* d = mkdtemp(tmpl.data());
    REQUIRE(d != nullptr);
    path = d;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  // The path of `name` inside the directory.
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// Writes bytes to path, replacing it.
inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace sf::testing

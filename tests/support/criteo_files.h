// Test helpers for the Criteo readers: well-formed lines that carry their
// number, and gzip files written with zlib.
#pragma once

#include <zlib.h>

#include <catch2/catch.hpp>

#include <string>

#include "kernels/criteo_format.h"

namespace sf::testing {

// A well-formed Criteo line (no '\n') whose C1 is the hex of n, so its id
// (CriteoCategoricalId(0, n)) tells the line apart; label n % 2, I1 = n % 100.
inline std::string CriteoLine(int64_t n) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(n));
  std::string line = std::to_string(n % 2) + "\t" + std::to_string(n % 100);
  for (int i = 1; i < kCriteoDense; ++i) line += "\t" + std::to_string(i);
  line += std::string("\t") + hex;
  for (int j = 1; j < kCriteoCategorical; ++j) line += "\tabc" + std::to_string(j);
  return line;
}

// Writes bytes to path as one gzip member (or as `members` members, cut at
// equal sizes, the way concatenated .gz files come).
inline void WriteGzipFile(const std::string& path, const std::string& bytes, int members = 1) {
  std::string out;
  for (int m = 0; m < members; ++m) {
    const size_t b = bytes.size() * m / members, e = bytes.size() * (m + 1) / members;
    z_stream z{};
    REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    std::string part(deflateBound(&z, e - b) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + b));
    z.avail_in = static_cast<uInt>(e - b);
    z.next_out = reinterpret_cast<Bytef*>(part.data());
    z.avail_out = static_cast<uInt>(part.size());
    REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
    part.resize(part.size() - z.avail_out);
    deflateEnd(&z);
    out += part;
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f);
  REQUIRE(std::fwrite(out.data(), 1, out.size(), f) == out.size());
  std::fclose(f);
}

}  // namespace sf::testing

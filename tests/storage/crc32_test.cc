#include <zlib.h>

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "storage/crc32.h"

using namespace sf;

namespace {

// zlib's CRC-32 of p[0, n): the independent reference.
uint32_t Zlib(const char* p, size_t n) {
  return static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(p), static_cast<uInt>(n)));
}

}  // namespace

TEST_CASE("crc32: matches zlib at every length and alignment", "[storage][crc32]") {
  INFO("carry-less multiply path: " << Crc32UsesClmul());
  CHECK(Crc32("123456789", 9) == 0xcbf43926u);  // the standard check value
  CHECK(Crc32("", 0) == 0u);
  std::mt19937_64 rng(5);
  std::vector<char> buf(1 << 20);
  for (auto& c : buf) c = static_cast<char>(rng());
  // Every length up to 300 (both sides of the 16- and 64-byte folds) at
  // every alignment mod 16, then random lengths and offsets.
  for (size_t n = 0; n <= 300; ++n)
    for (size_t off = 0; off < 16; ++off) REQUIRE(Crc32(&buf[off], n) == Zlib(&buf[off], n));
  for (int i = 0; i < 2000; ++i) {
    const size_t off = rng() % 4096, n = rng() % (buf.size() - off);
    REQUIRE(Crc32(&buf[off], n) == Zlib(&buf[off], n));
  }
  // All-zero and all-ones data.
  const std::string zeros(4096, '\0'), ones(4096, '\xff');
  CHECK(Crc32(zeros.data(), zeros.size()) == Zlib(zeros.data(), zeros.size()));
  CHECK(Crc32(ones.data(), ones.size()) == Zlib(ones.data(), ones.size()));
  // One flipped bit changes it.
  std::vector<char> copy(buf.begin(), buf.begin() + 5000);
  const uint32_t before = Crc32(copy.data(), copy.size());
  copy[1234] ^= 4;
  CHECK(Crc32(copy.data(), copy.size()) != before);
}

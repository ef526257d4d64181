#include "net/auth.h"

#include <errno.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace sf {
namespace net {

namespace {

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// SHA-256 over data fed in pieces.
class Sha256State {
 public:
  void Update(const uint8_t* p, size_t n) {
    total_ += n;
    while (n > 0) {
      const size_t take = std::min(n, sizeof(block_) - used_);
      std::memcpy(block_ + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
      if (used_ == sizeof(block_)) {
        Compress(block_);
        used_ = 0;
      }
    }
  }
  std::string Finish() {
    const uint64_t bits = total_ * 8;
    const uint8_t one = 0x80, zero = 0;
    Update(&one, 1);
    while (used_ != 56) Update(&zero, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    Update(len, 8);
    std::string out(32, '\0');
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<char>(h_[i] >> (24 - 8 * j));
    return out;
  }

 private:
  void Compress(const uint8_t* b) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t{b[4 * i]} << 24 | uint32_t{b[4 * i + 1]} << 16 | uint32_t{b[4 * i + 2]} << 8 | b[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], bb = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 =
          h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRoundConstants[i] + w[i];
      const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = bb;
      bb = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += bb;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

}  // namespace

std::string Sha256(const std::string& data) {
  Sha256State s;
  s.Update(Bytes(data), data.size());
  return s.Finish();
}

std::string HmacSha256(const std::string& key, const std::string& data) {
  constexpr size_t kBlock = 64;
  std::string k = key.size() > kBlock ? Sha256(key) : key;
  k.resize(kBlock, '\0');
  std::string ipad(kBlock, '\0'), opad(kBlock, '\0');
  for (size_t i = 0; i < kBlock; ++i) {
    ipad[i] = static_cast<char>(k[i] ^ 0x36);
    opad[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  Sha256State inner;
  inner.Update(Bytes(ipad), kBlock);
  inner.Update(Bytes(data), data.size());
  const std::string inner_digest = inner.Finish();
  Sha256State outer;
  outer.Update(Bytes(opad), kBlock);
  outer.Update(Bytes(inner_digest), inner_digest.size());
  return outer.Finish();
}

std::string RandomNonce() {
  std::string out(32, '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = getrandom(&out[got], out.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      // Without randomness every nonce would be predictable and proofs
      // replayable: refusing to run is the only safe answer.
      std::fprintf(stderr, "shardflow: getrandom failed: %s\n", std::strerror(errno));
      std::abort();
    }
    got += static_cast<size_t>(n);
  }
  return out;
}

std::string Proof(const std::string& secret, const std::string& role, const std::string& nonce) {
  return HmacSha256(secret, role + nonce);
}

bool ProofEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  // Accumulate every difference so the time does not reveal where the first is.
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | (static_cast<uint8_t>(a[i]) ^ static_cast<uint8_t>(b[i]));
  return diff == 0;
}

Result<std::string> ReadSecretFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return NotFound("cannot read secret file " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return NotFound("secret file " + path + " is not a regular file");
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return FailedPrecondition("secret file " + path + " has mode " + mode +
                              ": group or others may access it; run chmod 600 " + path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read secret file " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string secret = ss.str();
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (secret.size() < 16)
    return InvalidArgument("secret file " + path + " holds " + std::to_string(secret.size()) +
                           " bytes; a cluster secret needs at least 16 (e.g. head -c 32 /dev/urandom | base64)");
  return secret;
}

}  // namespace net
}  // namespace sf

// net/auth.h against published test vectors (FIPS 180-2, RFC 4231), and the
// secret file rules.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <set>
#include <string>

#include "net/auth.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using namespace sf::net;
using sf::testing::TempDir;
using sf::testing::WriteFile;

namespace {

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string Range(int from, int to) {  // bytes from..to inclusive
  std::string s;
  for (int i = from; i <= to; ++i) s += static_cast<char>(i);
  return s;
}

}  // namespace

TEST_CASE("SHA-256 matches FIPS 180-2", "[auth]") {
  CHECK(Hex(Sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Hex(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(Hex(Sha256(std::string(1000000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(Hex(Sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("HMAC-SHA256 matches RFC 4231", "[auth]") {
  CHECK(Hex(HmacSha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(Hex(HmacSha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(Hex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  CHECK(Hex(HmacSha256(Range(1, 25), std::string(50, '\xcd'))) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  CHECK(Hex(HmacSha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(Hex(HmacSha256(std::string(131, '\xaa'),
                       "This is a test using a larger than block-size key and a larger than block-size data. "
                       "The key needs to be hashed before being used by the HMAC algorithm.")) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("nonces are 32 fresh random bytes", "[auth]") {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string n = RandomNonce();
    CHECK(n.size() == 32);
    seen.insert(n);
  }
  CHECK(seen.size() == 100);
}

TEST_CASE("proofs depend on secret, role and nonce", "[auth]") {
  const std::string secret = "0123456789abcdef-cluster";
  const std::string nonce = RandomNonce();
  const std::string p = Proof(secret, "dialer", nonce);
  CHECK(p == HmacSha256(secret, "dialer" + nonce));
  CHECK(p.size() == 32);
  CHECK(ProofEquals(p, Proof(secret, "dialer", nonce)));
  CHECK_FALSE(ProofEquals(p, Proof(secret, "listener", nonce)));
  CHECK_FALSE(ProofEquals(p, Proof(secret + "x", "dialer", nonce)));
  CHECK_FALSE(ProofEquals(p, Proof(secret, "dialer", RandomNonce())));
  std::string last = p;
  last[31] = static_cast<char>(last[31] ^ 1);
  CHECK_FALSE(ProofEquals(p, last));
  CHECK_FALSE(ProofEquals(p, p.substr(0, 31)));
  CHECK(ProofEquals("", ""));
}

TEST_CASE("secret files: trimmed, long enough, private", "[auth]") {
  TempDir dir("sf_auth");
  const std::string path = dir / "secret";
  WriteFile(path, "0123456789abcdef\n");
  REQUIRE(::chmod(path.c_str(), 0600) == 0);
  auto s = ReadSecretFile(path);
  REQUIRE(s.ok());
  CHECK(*s == "0123456789abcdef");

  // Only one newline is trimmed; the rest is part of the secret.
  WriteFile(path, "0123456789abcdef\n\n");
  CHECK(*ReadSecretFile(path) == "0123456789abcdef\n");

  WriteFile(path, "0123456789abcde\n");  // 15 bytes after trimming
  auto shorter = ReadSecretFile(path);
  CHECK(shorter.status().code() == Code::kInvalidArgument);
  CHECK(shorter.status().message().find("at least 16") != std::string::npos);

  WriteFile(path, "0123456789abcdef");
  REQUIRE(::chmod(path.c_str(), 0640) == 0);
  auto open = ReadSecretFile(path);
  CHECK(open.status().code() == Code::kFailedPrecondition);
  CHECK(open.status().message().find(path) != std::string::npos);
  CHECK(open.status().message().find("chmod 600") != std::string::npos);
  REQUIRE(::chmod(path.c_str(), 0604) == 0);
  CHECK(ReadSecretFile(path).status().code() == Code::kFailedPrecondition);
  REQUIRE(::chmod(path.c_str(), 0400) == 0);
  CHECK(ReadSecretFile(path).ok());

  auto missing = ReadSecretFile(dir / "nope");
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(missing.status().message().find(dir / "nope") != std::string::npos);
}

// Authentication of peers by a shared cluster secret: SHA-256, HMAC-SHA256,
// nonces and proofs for the handshake of net/messages.h, and reading the
// secret file.
//
// A proof is HMAC-SHA256(secret, role || nonce), role "dialer" or
// "listener", so a proof made by one side can never be replayed as the
// other side's, and the secret itself never travels.
// Thread-safety: free functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shardflow/status.h"

namespace sf {
namespace net {

// The SHA-256 digest (32 raw bytes) of data (FIPS 180-4).
std::string Sha256(const std::string& data);
// HMAC-SHA256 (RFC 2104): 32 raw bytes.
std::string HmacSha256(const std::string& key, const std::string& data);

// 32 random bytes from getrandom(2); aborts only when the kernel has no
// random source at all (there is no secure way on).
std::string RandomNonce();

// HMAC(secret, role + nonce), role "dialer" or "listener".
std::string Proof(const std::string& secret, const std::string& role, const std::string& nonce);

// True when a and b are equal, in time that depends only on their lengths.
bool ProofEquals(const std::string& a, const std::string& b);

// The secret in `path`, without one trailing newline. NotFound naming the
// path when it cannot be read, FailedPrecondition when group or others may
// read it (like ssh keys: chmod 600), InvalidArgument when shorter than 16
// bytes.
Result<std::string> ReadSecretFile(const std::string& path);

}  // namespace net
}  // namespace sf

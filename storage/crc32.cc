#include "storage/crc32.h"

#include <zlib.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sf {
namespace {

// zlib's CRC of p[0, n) continuing from crc; zlib takes uInt lengths, so big
// buffers go in pieces.
uint32_t ZlibCrc(uint32_t crc, const char* p, size_t n) {
  uLong c = crc;
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, reinterpret_cast<const Bytef*>(p), chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

#if defined(__x86_64__)
// Folds 16-byte lanes with carry-less multiplies (Intel's "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ", as Linux's
// crc32-pclmul does for this polynomial): lane x becomes
// x.lo * k.lo ^ x.hi * k.hi, congruent to x shifted past the next 16 (k_1)
// or 64 (k_4) bytes, and absorbs those bytes. What is left is one 16-byte
// value with the same CRC register effect as everything folded, which zlib
// finishes along with the tail. REQUIRES: n >= 64.
__attribute__((target("pclmul,sse4.1"))) uint32_t ClmulCrc(const char* p, size_t n) {
  const __m128i k_4 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
  const __m128i k_1 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
  auto load = [](const char* q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); };
  auto fold = [](__m128i x, __m128i k, __m128i next) __attribute__((target("pclmul,sse4.1"))) {
    const __m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
    const __m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
  };
  // The register's initial all-ones state, applied to the first 4 bytes.
  __m128i x0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(-1));
  __m128i x1 = load(p + 16), x2 = load(p + 32), x3 = load(p + 48);
  p += 64;
  n -= 64;
  for (; n >= 64; p += 64, n -= 64) {
    x0 = fold(x0, k_4, load(p));
    x1 = fold(x1, k_4, load(p + 16));
    x2 = fold(x2, k_4, load(p + 32));
    x3 = fold(x3, k_4, load(p + 48));
  }
  x0 = fold(x0, k_1, x1);
  x0 = fold(x0, k_1, x2);
  x0 = fold(x0, k_1, x3);
  for (; n >= 16; p += 16, n -= 16) x0 = fold(x0, k_1, load(p));
  alignas(16) char folded[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(folded), x0);
  // zlib's crc32(c, ...) runs the register from ~c and complements the
  // result: starting from ~0 runs it from 0 over the folded bytes (the
  // all-ones start is already in them).
  return ZlibCrc(ZlibCrc(0xffffffffu, folded, 16), p, n);
}

#endif

// Asked once, on first use (not in a static initializer, which could run
// before the CPU model is known).
bool HasClmul() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace

uint32_t Crc32(const char* p, size_t n) {
#if defined(__x86_64__)
  if (n >= 64 && HasClmul()) return ClmulCrc(p, n);
#endif
  return ZlibCrc(0, p, n);
}

bool Crc32UsesClmul() { return HasClmul(); }

}  // namespace sf

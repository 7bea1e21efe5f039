// SHA-256: a portable compression function and one on the x86 SHA extensions, picked at run time.
#include "tt/common/sha256.h"

#include <algorithm>
#include <cstring>

#include "tt/common/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TT_SHA256_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace tt {
namespace {

constexpr std::uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

constexpr std::uint32_t kInitial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

inline std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

inline std::uint32_t load_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

void compress_portable(std::uint32_t* state, const std::uint8_t* blocks, std::size_t count) {
  for (; count > 0; --count, blocks += 64) {
    // A 16-word rolling schedule keeps the working set in registers rather than a 64-word array.
    std::uint32_t w[16];
    for (int i = 0; i < 16; ++i) w[i] = load_be32(blocks + 4 * i);
    std::uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    std::uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
#pragma GCC unroll 64
    for (int i = 0; i < 64; ++i) {
      if (i >= 16) {
        const std::uint32_t w15 = w[(i - 15) & 15], w2 = w[(i - 2) & 15];
        const std::uint32_t s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >> 3);
        const std::uint32_t s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >> 10);
        w[i & 15] += s0 + w[(i - 7) & 15] + s1;
      }
      const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i & 15];
      const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state[0] += a, state[1] += b, state[2] += c, state[3] += d;
    state[4] += e, state[5] += f, state[6] += g, state[7] += h;
  }
}

#ifdef TT_SHA256_X86
// The SHA-NI round sequence (Intel's published pattern): the state lives as ABEF/CDGH lanes,
// each sha256rnds2 does two rounds, and msg1/msg2 extend the schedule four words at a time.
__attribute__((target("sha,sse4.1"))) void compress_x86(std::uint32_t* state, const std::uint8_t* blocks,
                                                          std::size_t count) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state)), 0xB1);  // CDAB
  __m128i state1 = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4)), 0x1B);  // EFGH
  __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);     // ABEF
  state1 = _mm_blend_epi16(state1, tmp, 0xF0);          // CDGH
  for (; count > 0; --count, blocks += 64) {
    const __m128i abef = state0, cdgh = state1;
    __m128i msg[4];
#pragma GCC unroll 16
    for (int group = 0; group < 16; ++group) {
      // msg[group % 4] holds schedule words 4*group .. 4*group+3 once this step is done.
      __m128i& current = msg[group & 3];
      if (group < 4) {
        current = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 16 * group)), byte_swap);
      } else {
        const __m128i previous = msg[(group + 3) & 3];
        current = _mm_sha256msg1_epu32(current, msg[(group + 1) & 3]);
        current = _mm_add_epi32(current, _mm_alignr_epi8(previous, msg[(group + 2) & 3], 4));
        current = _mm_sha256msg2_epu32(current, previous);
      }
      __m128i words = _mm_add_epi32(current, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRound + 4 * group)));
      state1 = _mm_sha256rnds2_epu32(state1, state0, words);
      words = _mm_shuffle_epi32(words, 0x0E);
      state0 = _mm_sha256rnds2_epu32(state0, state1, words);
    }
    state0 = _mm_add_epi32(state0, abef);
    state1 = _mm_add_epi32(state1, cdgh);
  }
  tmp = _mm_shuffle_epi32(state0, 0x1B);       // FEBA
  state1 = _mm_shuffle_epi32(state1, 0xB1);    // DCHG
  state0 = _mm_blend_epi16(tmp, state1, 0xF0);  // DCBA
  state1 = _mm_alignr_epi8(state1, tmp, 8);     // HGFE: state[4..7] in memory order
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), state0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), state1);
}

bool cpu_has_sha() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool sha = (ebx >> 29) & 1;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const bool sse41 = (ecx >> 19) & 1;
  return sha && sse41;
}
#endif

bool has_extensions() {
#ifdef TT_SHA256_X86
  static const bool has = cpu_has_sha();  // thread-safe static initialisation; cpuid runs once
  return has;
#else
  return false;
#endif
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Sha256::Sha256(Sha256Impl impl) : compress_(compress_portable) {
#ifdef TT_SHA256_X86
  if (impl == Sha256Impl::Fastest && has_extensions()) compress_ = compress_x86;
#else
  (void)impl;
#endif
  reset();
}

void Sha256::reset() {
  std::memcpy(state_.data(), kInitial, sizeof(kInitial));
  block_bytes_ = 0;
  total_bytes_ = 0;
}

void Sha256::update(const void* data, std::size_t size) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  total_bytes_ += size;
  if (block_bytes_ > 0) {
    const std::size_t take = std::min(size, block_.size() - block_bytes_);
    std::memcpy(block_.data() + block_bytes_, bytes, take);
    block_bytes_ += take;
    bytes += take;
    size -= take;
    if (block_bytes_ < block_.size()) return;
    compress_(state_.data(), block_.data(), 1);
    block_bytes_ = 0;
  }
  // Whole blocks straight from the caller's memory: no copy on the fast path.
  const std::size_t whole = size / 64;
  if (whole > 0) compress_(state_.data(), bytes, whole);
  bytes += whole * 64;
  size -= whole * 64;
  if (size > 0) std::memcpy(block_.data(), bytes, size);
  block_bytes_ = size;
}

Sha256Digest Sha256::finish() {
  const std::uint64_t bits = total_bytes_ * 8;
  std::uint8_t padding[72] = {0x80};
  // 0x80, zeros up to 56 mod 64, then the 64-bit big-endian bit length.
  const std::size_t pad = (block_bytes_ < 56 ? 56 : 120) - block_bytes_;
  for (int i = 0; i < 8; ++i) padding[pad + i] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
  update(padding, pad + 8);
  Sha256Digest digest;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) digest[4 * i + j] = static_cast<std::uint8_t>(state_[i] >> (24 - 8 * j));
  }
  reset();
  return digest;
}

Sha256Digest sha256(const void* data, std::size_t size) {
  Sha256 hasher;
  hasher.update(data, size);
  return hasher.finish();
}

std::string digest_to_hex(const Sha256Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(64, '0');
  for (std::size_t i = 0; i < digest.size(); ++i) {
    hex[2 * i] = kDigits[digest[i] >> 4];
    hex[2 * i + 1] = kDigits[digest[i] & 15];
  }
  return hex;
}

Sha256Digest hex_to_digest(std::string_view hex) {
  Sha256Digest digest{};
  bool valid = hex.size() == 64;
  for (std::size_t i = 0; valid && i < digest.size(); ++i) {
    const int high = hex_value(hex[2 * i]), low = hex_value(hex[2 * i + 1]);
    valid = high >= 0 && low >= 0;
    digest[i] = static_cast<std::uint8_t>(high * 16 + low);
  }
  if (!valid) {
    throw Error(ErrorCode::InvalidArgument,
                "hex_to_digest: expected 64 hex digits, found '" + std::string(hex.substr(0, 80)) + "'");
  }
  return digest;
}

bool sha256_uses_cpu_extensions() { return has_extensions(); }

}  // namespace tt

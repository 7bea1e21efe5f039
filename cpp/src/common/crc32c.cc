// CRC-32C with the SSE4.2 crc32 instruction when present (three lanes at once), else a byte-wise table.
#include "tt/common/crc32c.h"

#include <array>
#include <cstring>

namespace tt {
namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t value = i;
    for (int bit = 0; bit < 8; ++bit) value = (value >> 1) ^ ((value & 1u) ? kPolynomial : 0u);
    table[i] = value;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> kTable = make_table();

std::uint32_t crc32c_table(const std::uint8_t* bytes, std::size_t size, std::uint32_t crc) {
  for (std::size_t i = 0; i < size; ++i) crc = kTable[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return crc;
}

// Multiplication modulo the polynomial, in the reflected bit order the checksum uses (the
// top bit is x^0): how a checksum is carried past bytes it did not see (zlib's multmodp).
constexpr std::uint32_t multiply_mod_p(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (std::uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// x^(8 * bytes) modulo the polynomial: multiplying a checksum's register by it is what
// running it over `bytes` zero bytes does.
constexpr std::uint32_t shift_by(std::uint64_t bytes) {
  std::uint32_t result = 1u << 31;  // x^0
  std::uint32_t power = 1u << 30;   // x^1, squared as the exponent's bits are read
  for (std::uint64_t exponent = 8 * bytes; exponent != 0; exponent >>= 1) {
    if (exponent & 1u) result = multiply_mod_p(result, power);
    power = multiply_mod_p(power, power);
  }
  return result;
}

#if defined(__x86_64__)
// The crc32 instruction takes 3 cycles and can start every cycle: one chain of it runs at a
// third of the core's speed (~9 GB/s), which cost the I/O threads of a streamed Llama call
// 270 ms of CPU. Three independent lanes fill the pipeline and are joined by shifting the
// first two past the bytes after them (the checksum is linear).
constexpr std::size_t kLane = 8192;
constexpr std::uint32_t kShiftOneLane = shift_by(kLane);
constexpr std::uint32_t kShiftTwoLanes = shift_by(2 * kLane);

__attribute__((target("sse4.2"))) std::uint64_t crc32c_words(std::uint64_t crc, const std::uint8_t* bytes,
                                                              std::size_t words) {
  for (std::size_t i = 0; i < words; ++i, bytes += 8) {
    std::uint64_t word;
    std::memcpy(&word, bytes, 8);
    crc = __builtin_ia32_crc32di(crc, word);
  }
  return crc;
}

__attribute__((target("sse4.2"))) std::uint32_t crc32c_x86(const std::uint8_t* bytes, std::size_t size,
                                                            std::uint32_t crc) {
  std::uint64_t value = crc;
  for (; size >= 3 * kLane; size -= 3 * kLane, bytes += 3 * kLane) {
    std::uint64_t first = value, second = 0, third = 0;
    for (std::size_t at = 0; at < kLane; at += 8) {
      std::uint64_t words[3];
      std::memcpy(&words[0], bytes + at, 8);
      std::memcpy(&words[1], bytes + kLane + at, 8);
      std::memcpy(&words[2], bytes + 2 * kLane + at, 8);
      first = __builtin_ia32_crc32di(first, words[0]);
      second = __builtin_ia32_crc32di(second, words[1]);
      third = __builtin_ia32_crc32di(third, words[2]);
    }
    value = multiply_mod_p(kShiftTwoLanes, static_cast<std::uint32_t>(first)) ^
            multiply_mod_p(kShiftOneLane, static_cast<std::uint32_t>(second)) ^ static_cast<std::uint32_t>(third);
  }
  value = crc32c_words(value, bytes, size / 8);
  bytes += size / 8 * 8;
  crc = static_cast<std::uint32_t>(value);
  for (size %= 8; size > 0; --size, ++bytes) crc = __builtin_ia32_crc32qi(crc, *bytes);
  return crc;
}

bool has_instruction() {
  static const bool present = __builtin_cpu_supports("sse4.2");
  return present;
}
#else
bool has_instruction() { return false; }
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (has_instruction()) return ~crc32c_x86(bytes, size, crc);
#endif
  return ~crc32c_table(bytes, size, crc);
}

bool crc32c_uses_cpu_instruction() { return has_instruction(); }

}  // namespace tt

// CRC-32C with the CPU's crc32 instruction where it has one (x86's SSE4.2, ARMv8's CRC
// extension), in three lanes at once; else eight table lookups per 8 bytes.
#include "tt/common/crc32c.h"

#include <array>
#include <bit>
#include <cstring>

#if defined(__aarch64__)
#include <arm_acle.h>
#include <sys/auxv.h>
#endif

namespace tt {
namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli polynomial

std::uint64_t load_little_endian(const std::uint8_t* bytes) {
  std::uint64_t word;
  std::memcpy(&word, bytes, 8);
  if constexpr (std::endian::native == std::endian::big) word = __builtin_bswap64(word);
  return word;
}

// Slicing by 8: table k holds the checksum's step over a byte followed by k zero bytes, so
// one 8-byte word takes eight independent lookups instead of eight dependent ones.
using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables tables{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t value = i;
    for (int bit = 0; bit < 8; ++bit) value = (value >> 1) ^ ((value & 1u) ? kPolynomial : 0u);
    tables[0][i] = value;
  }
  for (std::size_t k = 1; k < tables.size(); ++k) {
    for (std::uint32_t i = 0; i < 256; ++i) {
      const std::uint32_t previous = tables[k - 1][i];
      tables[k][i] = (previous >> 8) ^ tables[0][previous & 0xFFu];
    }
  }
  return tables;
}

constexpr Tables kTables = make_tables();

std::uint32_t crc32c_tables(const std::uint8_t* bytes, std::size_t size, std::uint32_t crc) {
  for (; size >= 8; size -= 8, bytes += 8) {
    const std::uint64_t word = load_little_endian(bytes) ^ crc;
    crc = 0;
    for (std::size_t k = 0; k < 8; ++k) crc ^= kTables[7 - k][(word >> (8 * k)) & 0xFFu];
  }
  for (; size > 0; --size, ++bytes) crc = kTables[0][(crc ^ *bytes) & 0xFFu] ^ (crc >> 8);
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
#define TT_CRC_TARGET __attribute__((target("sse4.2")))
TT_CRC_TARGET inline std::uint64_t step_word(std::uint64_t crc, std::uint64_t word) {
  return __builtin_ia32_crc32di(crc, word);
}
TT_CRC_TARGET inline std::uint32_t step_byte(std::uint32_t crc, std::uint8_t byte) {
  return __builtin_ia32_crc32qi(crc, byte);
}
bool has_instruction() {
  static const bool present = __builtin_cpu_supports("sse4.2");
  return present;
}
#elif defined(__aarch64__) && !defined(__clang__)  // clang spells the target "crc": untested, so tables
#define TT_CRC_TARGET __attribute__((target("+crc")))
TT_CRC_TARGET inline std::uint64_t step_word(std::uint64_t crc, std::uint64_t word) {
  return __crc32cd(static_cast<std::uint32_t>(crc), word);
}
TT_CRC_TARGET inline std::uint32_t step_byte(std::uint32_t crc, std::uint8_t byte) { return __crc32cb(crc, byte); }
bool has_instruction() {
  static const bool present = (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
  return present;
}
#endif

#if defined(TT_CRC_TARGET)
// The instruction takes 3 cycles and can start every cycle: one chain of it runs at a third
// of the core's speed (9.7 GB/s here), which cost the I/O threads of a streamed Llama call
// 270 ms of CPU. Three independent lanes fill the pipeline and are joined by shifting the
// first two past the bytes after them (the checksum is linear).
constexpr std::size_t kLane = 8192;
constexpr std::uint32_t kShiftOneLane = shift_by(kLane);
constexpr std::uint32_t kShiftTwoLanes = shift_by(2 * kLane);

TT_CRC_TARGET std::uint32_t crc32c_instruction(const std::uint8_t* bytes, std::size_t size, std::uint32_t crc) {
  for (; size >= 3 * kLane; size -= 3 * kLane, bytes += 3 * kLane) {
    std::uint64_t first = crc, second = 0, third = 0;
    for (std::size_t at = 0; at < kLane; at += 8) {
      first = step_word(first, load_little_endian(bytes + at));
      second = step_word(second, load_little_endian(bytes + kLane + at));
      third = step_word(third, load_little_endian(bytes + 2 * kLane + at));
    }
    crc = multiply_mod_p(kShiftTwoLanes, static_cast<std::uint32_t>(first)) ^
          multiply_mod_p(kShiftOneLane, static_cast<std::uint32_t>(second)) ^ static_cast<std::uint32_t>(third);
  }
  std::uint64_t value = crc;
  for (; size >= 8; size -= 8, bytes += 8) value = step_word(value, load_little_endian(bytes));
  crc = static_cast<std::uint32_t>(value);
  for (; size > 0; --size, ++bytes) crc = step_byte(crc, *bytes);
  return crc;
}
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) {
#if defined(TT_CRC_TARGET)
  if (has_instruction()) return ~crc32c_instruction(static_cast<const std::uint8_t*>(data), size, ~crc);
#endif
  return crc32c_portable(data, size, crc);
}

std::uint32_t crc32c_portable(const void* data, std::size_t size, std::uint32_t crc) {
  return ~crc32c_tables(static_cast<const std::uint8_t*>(data), size, ~crc);
}

}  // namespace tt

// CRC-32C with the SSE4.2 crc32 instruction when present, else a byte-wise table.
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

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_x86(const std::uint8_t* bytes, std::size_t size,
                                                            std::uint32_t crc) {
  std::uint64_t value = crc;
  for (; size >= 8; size -= 8, bytes += 8) {
    std::uint64_t word;
    std::memcpy(&word, bytes, 8);
    value = __builtin_ia32_crc32di(value, word);
  }
  crc = static_cast<std::uint32_t>(value);
  for (; size > 0; --size, ++bytes) crc = __builtin_ia32_crc32qi(crc, *bytes);
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

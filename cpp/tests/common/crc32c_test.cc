// Tests of CRC-32C: the standard check values, incremental use, and every length (the
// instruction's three-lane blocks and their tails) agreeing with a bit-at-a-time reference.
#include "tt/common/crc32c.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace tt {
namespace {

TEST(Crc32cTest, MatchesTheStandardCheckValues) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(crc32c_portable(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  const std::vector<std::uint8_t> zeros(32, 0);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720, B.4
}

// The definition, one bit at a time: slow, and too simple to share a bug with crc32c().
std::uint32_t reference_crc32c(const std::uint8_t* bytes, std::size_t size) {
  std::uint32_t crc = ~0u;
  for (std::size_t i = 0; i < size; ++i) {
    crc ^= bytes[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
  }
  return ~crc;
}

std::vector<std::uint8_t> random_bytes(std::size_t size, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<std::uint8_t> bytes(size);
  for (auto& byte : bytes) byte = static_cast<std::uint8_t>(random());
  return bytes;
}

TEST(Crc32cTest, AgreesWithTheDefinitionAcrossBlocksAndTails) {
  const std::vector<std::uint8_t> bytes = random_bytes(3 * 3 * 8192 + 4099, 11);
  const std::size_t block = 3 * 8192;
  for (std::size_t size : {std::size_t{1}, std::size_t{8191}, block - 1, block, block + 1, block + 13, 2 * block + 8,
                           bytes.size()}) {
    EXPECT_EQ(crc32c(bytes.data(), size), reference_crc32c(bytes.data(), size)) << size << " bytes";
    const std::size_t shifted = std::min(size, bytes.size() - 3);  // from an odd address, within the bytes
    EXPECT_EQ(crc32c(bytes.data() + 3, shifted), reference_crc32c(bytes.data() + 3, shifted)) << "unaligned";
    EXPECT_EQ(crc32c_portable(bytes.data(), size), reference_crc32c(bytes.data(), size)) << size << " bytes, tables";
  }
}

TEST(Crc32cTest, IncrementalEqualsOneShotAtEveryLength) {
  std::vector<std::uint8_t> bytes = random_bytes(3 * 8192 + 10007, 5);
  const std::uint32_t whole = crc32c(bytes.data(), bytes.size());
  for (std::size_t split : {0u, 1u, 7u, 8u, 9u, 4096u, 10006u, 24576u, 24577u}) {
    const std::uint32_t first = crc32c(bytes.data(), split);
    EXPECT_EQ(crc32c(bytes.data() + split, bytes.size() - split, first), whole) << "split at " << split;
    EXPECT_EQ(crc32c_portable(bytes.data() + split, bytes.size() - split, first), whole) << "tables, at " << split;
  }
  bytes[5000] ^= 1;
  EXPECT_NE(crc32c(bytes.data(), bytes.size()), whole);
}

}  // namespace
}  // namespace tt

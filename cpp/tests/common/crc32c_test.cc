// Tests of CRC-32C: the standard check value, incremental use, and the table agreeing with the instruction.
#include "tt/common/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace tt {
namespace {

TEST(Crc32cTest, MatchesTheStandardCheckValues) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  const std::vector<std::uint8_t> zeros(32, 0);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720, B.4
}

TEST(Crc32cTest, IncrementalEqualsOneShotAtEveryLength) {
  std::mt19937 random(5);
  std::vector<std::uint8_t> bytes(10007);
  for (auto& byte : bytes) byte = static_cast<std::uint8_t>(random());
  const std::uint32_t whole = crc32c(bytes.data(), bytes.size());
  for (std::size_t split : {0u, 1u, 7u, 8u, 9u, 4096u, 10006u}) {
    const std::uint32_t first = crc32c(bytes.data(), split);
    EXPECT_EQ(crc32c(bytes.data() + split, bytes.size() - split, first), whole) << "split at " << split;
  }
  bytes[5000] ^= 1;
  EXPECT_NE(crc32c(bytes.data(), bytes.size()), whole);
}

}  // namespace
}  // namespace tt

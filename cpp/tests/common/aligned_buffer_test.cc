// Tests of aligned buffers: alignment, huge-page-aligned mappings for large ones, moves.
#include "tt/common/aligned_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace tt {
namespace {

std::uintptr_t address(const AlignedBuffer& buffer) { return reinterpret_cast<std::uintptr_t>(buffer.data()); }

TEST(AlignedBufferTest, SmallBuffersHonourTheirAlignment) {
  const AlignedBuffer buffer(10000, 4096);
  EXPECT_EQ(address(buffer) % 4096, 0u);
  EXPECT_EQ(buffer.size(), 10000u);
  EXPECT_FALSE(buffer.huge_page_aligned());
  const AlignedBuffer empty(0, 64);  // still a valid, distinct allocation
  EXPECT_NE(empty.data(), nullptr);
}

TEST(AlignedBufferTest, LargeBuffersStartOnAHugePageBoundaryAndAreWritableToTheEnd) {
  const std::size_t size = AlignedBuffer::kHugePageBytes + 12345;  // not a multiple of any page size
  const AlignedBuffer buffer(size, 4096);
  EXPECT_TRUE(buffer.huge_page_aligned());
  EXPECT_EQ(address(buffer) % AlignedBuffer::kHugePageBytes, 0u);
  std::memset(buffer.data(), 0x5a, size);
  EXPECT_EQ(buffer.data()[size - 1], 0x5a);
}

TEST(AlignedBufferTest, AnAlignmentBeyondAHugePageIsStillHonoured) {
  const std::size_t alignment = AlignedBuffer::kHugePageBytes * 2;
  const AlignedBuffer buffer(AlignedBuffer::kHugePageBytes * 3, alignment);
  EXPECT_EQ(address(buffer) % alignment, 0u);
}

TEST(AlignedBufferTest, AMoveTransfersOwnership) {
  AlignedBuffer first(AlignedBuffer::kHugePageBytes, 4096);
  char* data = first.data();
  AlignedBuffer second(std::move(first));
  EXPECT_EQ(second.data(), data);
  EXPECT_TRUE(second.huge_page_aligned());
  EXPECT_EQ(first.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(first.size(), 0u);
}

}  // namespace
}  // namespace tt

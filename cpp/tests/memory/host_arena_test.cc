// Tests of host arenas and their pool: alignment, zeroing, reuse across calls, handles outliving the pool.
#include "tt/memory/host_arena.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "tt/common/error.h"

namespace tt {
namespace {

TEST(HostArenaTest, IsAlignedAndZeroed) {
  HostArena arena(10000, 4096);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(arena.data()) % 4096, 0u);
  for (std::int64_t i = 0; i < arena.size(); ++i) ASSERT_EQ(arena.data()[i], std::byte{0});
  HostArena empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_THROW(HostArena(10, 48), Error);
  EXPECT_THROW(HostArena(-1), Error);
}

TEST(HostArenaTest, LargeArenasAreZeroedHugePageAlignedMappings) {
  HostArena large(3 * (1 << 20) + 123, 4096);
  EXPECT_TRUE(large.huge_page_aligned());
  for (std::int64_t i = 0; i < large.size(); i += 4093) ASSERT_EQ(large.data()[i], std::byte{0});
  EXPECT_FALSE(HostArena(1 << 20).huge_page_aligned());
}

TEST(HostArenaTest, PoolReusesArenasAcrossCalls) {
  HostArenaPool pool(1 << 16);
  const std::byte* first = nullptr;
  {
    auto arena = pool.acquire();
    first = arena->data();
    arena->data()[0] = std::byte{7};
  }
  auto again = pool.acquire();  // the same arena, handed back when the first call ended
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(again->data()[0], std::byte{7});
  auto concurrent = pool.acquire();  // a second call at once gets its own
  EXPECT_NE(concurrent->data(), first);
  EXPECT_EQ(pool.allocated(), 2u);
}

TEST(HostArenaTest, AHandleMayOutliveItsPool) {
  std::shared_ptr<HostArena> kept;
  {
    HostArenaPool pool(4096);
    kept = pool.acquire();
  }
  kept->data()[4095] = std::byte{1};  // still valid; freed when `kept` goes (ASan checks)
  EXPECT_EQ(kept->size(), 4096);
}

}  // namespace
}  // namespace tt

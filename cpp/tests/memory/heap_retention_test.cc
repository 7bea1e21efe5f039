// Tests of heap retention: it only ever rises, and a freed block comes back without page faults.
#include "tt/memory/heap_retention.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

#include "tt/common/error.h"

namespace tt {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // the sanitizer's own allocator replaces glibc's malloc
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

TEST(HeapRetentionTest, OnlyEverRises) {
  EXPECT_THROW(retain_freed_heap(-1), Error);
  const HeapRetention first = retain_freed_heap(0);
#if defined(__GLIBC__)
  // A sanitizer's mallopt refuses: nothing is set, and retention says so.
  if (kSanitized && !first.supported) GTEST_SKIP() << "the sanitizer's allocator takes no malloc thresholds";
  ASSERT_TRUE(first.supported);
  EXPECT_GE(first.trim_bytes, 64 << 20);
  EXPECT_EQ(first.mmap_threshold, 32 << 20);
  const HeapRetention raised = retain_freed_heap(std::int64_t{200} << 20);
  EXPECT_EQ(raised.trim_bytes, std::int64_t{200} << 20);
  EXPECT_EQ(retain_freed_heap(1 << 20).trim_bytes, std::int64_t{200} << 20);  // never lowered
  EXPECT_EQ(heap_retention().trim_bytes, std::int64_t{200} << 20);
#else
  EXPECT_FALSE(first.supported);
  EXPECT_EQ(heap_retention().trim_bytes, 0);
#endif
}

#if defined(__GLIBC__)
TEST(HeapRetentionTest, FreedBlockComesBackWithoutPageFaults) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer's allocator, not glibc's malloc, serves this build";
  retain_freed_heap(0);
  constexpr std::size_t kBytes = 24 << 20;  // a language model's logits: below the mmap threshold
  auto touch = [](std::size_t bytes) {
    auto* block = static_cast<char*>(std::malloc(bytes));
    std::memset(block, 1, bytes);
    std::free(block);
  };
  touch(kBytes);  // the heap grows to hold it once
  const long before = minor_faults();
  for (int call = 0; call < 5; ++call) touch(kBytes);
  // Given back to the OS, each block would fault in its 6,144 pages again.
  EXPECT_LT(minor_faults() - before, 100);
}
#endif

}  // namespace
}  // namespace tt

// Aligned host memory: huge-page-aligned mappings for large buffers (see the header's why).
#include "tt/common/aligned_buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "tt/common/error.h"

namespace tt {
namespace {

// A mapping of `bytes` (a multiple of the page size) on a huge-page boundary, advised to use
// transparent huge pages; null when the mapping fails.
void* map_huge_aligned(std::size_t bytes) {
  const std::size_t span = bytes + AlignedBuffer::kHugePageBytes;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + AlignedBuffer::kHugePageBytes - 1) & ~(AlignedBuffer::kHugePageBytes - 1);
  const std::uintptr_t end = aligned + bytes;
  // Gives back the unaligned head and what lies beyond `bytes`.
  if (aligned > start) ::munmap(raw, aligned - start);
  if (start + span > end) ::munmap(reinterpret_cast<void*>(end), start + span - end);
#ifdef MADV_HUGEPAGE
  ::madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // advice: may be refused
#endif
  return reinterpret_cast<void*>(aligned);
}

constexpr std::size_t kPageBytes = 4096;

}  // namespace

AlignedBuffer::AlignedBuffer(std::size_t size, std::size_t alignment) : size_(size) {
  if (size >= kHugePageBytes && alignment <= kHugePageBytes) {
    const std::size_t rounded = (size + kPageBytes - 1) / kPageBytes * kPageBytes;
    data_ = map_huge_aligned(rounded);
    if (data_ != nullptr) mapped_bytes_ = rounded;
  } else if (::posix_memalign(&data_, alignment, size == 0 ? 1 : size) != 0) {
    data_ = nullptr;
  }
  if (data_ == nullptr) {
    throw Error(ErrorCode::ResourceExhausted,
                "cannot allocate " + std::to_string(size) + " bytes aligned to " + std::to_string(alignment));
  }
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(other.data_), size_(other.size_), mapped_bytes_(other.mapped_bytes_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.mapped_bytes_ = 0;
}

AlignedBuffer::~AlignedBuffer() {
  if (mapped_bytes_ > 0) {
    ::munmap(data_, mapped_bytes_);
  } else {
    std::free(data_);
  }
}

}  // namespace tt

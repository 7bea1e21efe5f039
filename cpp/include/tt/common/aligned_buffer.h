// Aligned host memory for O_DIRECT reads, pinning and the core's arenas.
#pragma once

#include <cstddef>

namespace tt {

// Host memory aligned to a power of two, freed on destruction. Move-only; the bytes are
// uninitialised; not thread-safe (callers share data() as they see fit).
//
// Buffers of kHugePageBytes and more are mappings of their own that start on a huge-page
// boundary and are advised to use transparent huge pages. Why: an O_DIRECT read goes to
// the disk as one request per run of physically contiguous pages (at most the queue's
// max_segments of them), so a destination of scattered 4 KiB pages splits each 16 MiB read
// into requests of ~1 MiB or less, while 2 MiB pages let it go out in requests of the
// queue's full size. Measured here on one virtio disk: the same streamed program read at
// 1.4 GB/s into scattered pages and 2.7 GB/s into huge ones. Where transparent huge pages
// are off, such a buffer simply keeps 4 KiB pages.
class AlignedBuffer {
 public:
  static constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

  // Allocates `size` bytes (at least one) aligned to `alignment`, a power of two multiple
  // of sizeof(void*). Throws Error(ResourceExhausted) naming the size when it fails.
  AlignedBuffer(std::size_t size, std::size_t alignment);
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&&) = delete;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  // The memory, owned by this object until it is destroyed.
  char* data() const noexcept { return static_cast<char*>(data_); }
  std::size_t size() const noexcept { return size_; }
  // True when the buffer is a mapping of its own on a huge-page boundary.
  bool huge_page_aligned() const noexcept { return mapped_bytes_ > 0; }

 private:
  void* data_ = nullptr;
  std::size_t size_;
  std::size_t mapped_bytes_ = 0;  // > 0: data_ is a mapping of this many bytes, else from posix_memalign
};

}  // namespace tt

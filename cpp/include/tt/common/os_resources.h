// RAII owners of the OS resources the I/O code shares: file descriptors and aligned buffers.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <string>

#include "tt/common/error.h"

namespace tt {

// An open file descriptor (or -1), closed when the owner is destroyed or reset. Move-only;
// not thread-safe.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  // The descriptor, still owned by this object; -1 if none.
  int get() const noexcept { return fd_; }

  // Closes the current descriptor (if any) and takes ownership of `fd`.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

  // Gives up ownership without closing; returns the descriptor.
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// Heap memory aligned for O_DIRECT (or any power-of-two alignment), freed on destruction.
// Move-only; the bytes are uninitialised; not thread-safe (callers share data() as they see fit).
class AlignedBuffer {
 public:
  // Allocates `size` bytes (at least one) aligned to `alignment`, a power of two multiple of
  // sizeof(void*). Throws Error(ResourceExhausted) naming the size when the allocation fails.
  AlignedBuffer(std::size_t size, std::size_t alignment) : size_(size) {
    if (::posix_memalign(&data_, alignment, size == 0 ? 1 : size) != 0) {
      data_ = nullptr;
      throw Error(ErrorCode::ResourceExhausted, "cannot allocate " + std::to_string(size) + " bytes aligned to " +
                                                    std::to_string(alignment));
    }
  }
  AlignedBuffer(AlignedBuffer&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
    other.size_ = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&&) = delete;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  // The memory, owned by this object until it is destroyed.
  char* data() const noexcept { return static_cast<char*>(data_); }
  std::size_t size() const noexcept { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_;
};

}  // namespace tt

// RAII owner of the OS resource the I/O code shares: file descriptors.
#pragma once

#include <unistd.h>

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

}  // namespace tt

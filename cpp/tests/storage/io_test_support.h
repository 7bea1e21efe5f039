// Test helpers shared by the I/O backend and engine tests: temporary files and instrumented backends.
#pragma once

#include <fcntl.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../common/gate.h"
#include "tt/common/error.h"
#include "tt/storage/io_backend.h"

namespace tt::test {

// Runs `body` and returns the tt::Error it throws; fails the test if it throws none.
template <typename Body>
Error error_of(Body body) {
  try {
    body();
  } catch (const Error& error) {
    // A fresh message: copies of a std::runtime_error share theirs, and the engine's thread may
    // still release the original.
    return Error(error.code(), std::string(error.what()));
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::Internal, "no error");
}

inline bool contains(const Error& error, const std::string& text) {
  return std::string(error.what()).find(text) != std::string::npos;
}

// A unique directory, removed with its contents on destruction. Under $TT_TEST_TMPDIR when set
// (point it at a real disk where /tmp is tmpfs), else the system temporary directory.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const char* base = std::getenv("TT_TEST_TMPDIR");
    root_ = (base != nullptr && *base != '\0' ? std::filesystem::path(base) : std::filesystem::temp_directory_path()) /
            ("tt_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(root_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }

  // Absolute path of `name` in the directory.
  std::string path(const std::string& name) const { return (root_ / name).string(); }
  // The directory itself.
  std::string root() const { return root_.string(); }

  // Writes `bytes` to `name` in the directory and returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(root_ / name, std::ios::binary) << bytes;
    return path(name);
  }

 private:
  std::filesystem::path root_;
};

// Random bytes from a fixed seed.
inline std::vector<std::uint8_t> random_bytes(std::size_t size, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::uint8_t> bytes(size);
  for (auto& byte : bytes) byte = static_cast<std::uint8_t>(random() >> 24);
  return bytes;
}

// Writes `bytes` to `path`, replacing it.
inline void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Whether files in `directory` can be created with O_TMPFILE (never named in it).
inline bool supports_o_tmpfile(const std::string& directory) {
  const int probe = ::open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (probe < 0) return false;
  ::close(probe);
  return true;
}

// The names created in (or moved into) a directory while the watch lives, seen through inotify,
// which queues each event during the call that makes the name: a name that exists only for an
// instant is still seen. Not thread-safe.
class CreationWatch {
 public:
  explicit CreationWatch(const std::string& directory) : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
    if (fd_ < 0 || ::inotify_add_watch(fd_, directory.c_str(), IN_CREATE | IN_MOVED_TO) < 0) {
      throw std::runtime_error("inotify on '" + directory + "' failed");
    }
  }
  CreationWatch(const CreationWatch&) = delete;
  CreationWatch& operator=(const CreationWatch&) = delete;
  ~CreationWatch() { ::close(fd_); }

  // Every name seen so far.
  const std::vector<std::string>& created() {
    alignas(inotify_event) char events[4096];
    for (ssize_t got; (got = ::read(fd_, events, sizeof events)) > 0;) {
      for (ssize_t at = 0; at < got;) {
        const auto* event = reinterpret_cast<const inotify_event*>(events + at);
        if (event->len > 0) names_.emplace_back(event->name);
        at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      }
    }
    return names_;
  }

 private:
  int fd_;
  std::vector<std::string> names_;
};


// Passes calls to the POSIX backend, but each pread first waits at a gate; records how many preads
// are waiting or running at once (the engine's queue depth, seen from below). Thread-safe.
class BlockingBackend final : public IoBackend {
 public:
  int open(const std::string& path, bool direct) override { return posix_.open(path, direct); }
  int truncate(int handle) noexcept override { return posix_.truncate(handle); }
  void close(int handle) noexcept override { posix_.close(handle); }
  FileIdentity identity(int handle) override { return posix_.identity(handle); }
  int open_for_spill(const std::string& directory) override { return posix_.open_for_spill(directory); }
  ssize_t pwrite(int handle, const void* source, std::size_t length, std::uint64_t offset) noexcept override {
    return posix_.pwrite(handle, source, length, offset);
  }
  ssize_t pread(int handle, void* destination, std::size_t length, std::uint64_t offset) noexcept override {
    {
      std::lock_guard lock(mutex_);
      max_concurrent_ = std::max(max_concurrent_, ++concurrent_);
      changed_.notify_all();
    }
    gate.wait();
    const ssize_t got = posix_.pread(handle, destination, length, offset);
    std::lock_guard lock(mutex_);
    --concurrent_;
    return got;
  }

  // Blocks until at least `count` preads are inside pread at once.
  void wait_for_concurrent(int count) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return concurrent_ >= count; });
  }
  int max_concurrent() {
    std::lock_guard lock(mutex_);
    return max_concurrent_;
  }

  Gate gate;  // preads proceed once the test opens it

 private:
  PosixIoBackend posix_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int concurrent_ = 0;
  int max_concurrent_ = 0;
};

// Passes calls to the POSIX backend but reports files `extra` bytes longer than they are, so that
// a read runs into the real end of the file (a file truncated after it was opened).
class LongerFileBackend final : public IoBackend {
 public:
  explicit LongerFileBackend(std::uint64_t extra) : extra_(extra) {}
  int open(const std::string& path, bool direct) override { return posix_.open(path, direct); }
  int truncate(int handle) noexcept override { return posix_.truncate(handle); }
  void close(int handle) noexcept override { posix_.close(handle); }
  FileIdentity identity(int handle) override {
    FileIdentity identity = posix_.identity(handle);
    identity.size += extra_;
    return identity;
  }
  ssize_t pread(int handle, void* destination, std::size_t length, std::uint64_t offset) noexcept override {
    return posix_.pread(handle, destination, length, offset);
  }
  int open_for_spill(const std::string& directory) override { return posix_.open_for_spill(directory); }
  ssize_t pwrite(int handle, const void* source, std::size_t length, std::uint64_t offset) noexcept override {
    return posix_.pwrite(handle, source, length, offset);
  }

 private:
  PosixIoBackend posix_;
  std::uint64_t extra_;
};

}  // namespace tt::test

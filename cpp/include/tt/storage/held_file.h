// A named file opened once and read through that one handle for as long as its reader lives.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "tt/storage/io_backend.h"

namespace tt {

// A weights file a data plane reads on every call. Opened by the first read that needs it
// and kept open from then on, so that what the plane was built against stays readable when
// the path is deleted, renamed or replaced (a new artifact saved over it): the plane goes on
// reading the file it verified, never another one that took its name. Thread-safe; owns its
// handle (closed by the destructor, after the last read holding it has completed).
class HeldFile {
 public:
  HeldFile(std::shared_ptr<IoBackend> backend, std::string path);
  ~HeldFile();
  HeldFile(const HeldFile&) = delete;
  HeldFile& operator=(const HeldFile&) = delete;

  // The open handle; the first call opens the path (errors as IoBackend::open: a failed open
  // is tried again by the next call).
  int handle();
  const std::string& path() const noexcept { return path_; }

 private:
  std::shared_ptr<IoBackend> backend_;
  std::string path_;
  std::mutex mutex_;
  int handle_ = -1;  // guarded by mutex_
};

}  // namespace tt

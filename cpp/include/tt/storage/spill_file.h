// Anonymous files that hold a call's spilled bytes, and the pool that reuses them across calls.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "tt/memory/reuse_pool.h"
#include "tt/storage/io_backend.h"

namespace tt {

// One file from IoBackend::open_for_spill: nothing in its directory names it, so its bytes
// vanish when it is closed or the process dies. Owns its handle (closed by the destructor);
// not copyable. Thread-safe: the handle is read and written through the backend, whose
// calls are thread-safe, by whoever writes distinct byte ranges.
class SpillFile {
 public:
  // Creates the file in `directory`; errors as IoBackend::open_for_spill.
  SpillFile(std::shared_ptr<IoBackend> backend, const std::string& directory);
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  int handle() const noexcept { return handle_; }
  // Truncates the file to 0 bytes, giving its blocks back; 0 or -errno (IoBackend::truncate).
  int empty() noexcept { return backend_->truncate(handle_); }
  // "the spill file in '<directory>'": how I/O errors name a file that has no name.
  const std::string& name() const noexcept { return name_; }

 private:
  std::shared_ptr<IoBackend> backend_;
  int handle_ = -1;
  std::string name_;
};

// Spill files in one directory, kept open for reuse as HostArenaPool keeps arenas: a call
// takes one and it comes back when the call's last handle drops (the call's end, or a write
// still in flight after a stall), so steady-state calls create no file and concurrent calls
// never share one. A file is emptied as it comes back (truncated to 0 bytes): between calls
// the spill directory holds no spilled byte, also after a failed or cancelled call.
// Thread-safe. The destructor closes the pooled files; handles may outlive the pool (their
// file is then closed when they drop).
class SpillFilePool {
 public:
  SpillFilePool(std::shared_ptr<IoBackend> backend, std::string directory);

  // A pooled file, or a new one (errors as IoBackend::open_for_spill) when every pooled file is in use.
  std::shared_ptr<SpillFile> acquire();

  // Files created so far (in use or pooled).
  std::size_t created() const { return pool_.created(); }

 private:
  std::shared_ptr<IoBackend> backend_;
  std::string directory_;
  ReusePool<SpillFile> pool_;
};

}  // namespace tt

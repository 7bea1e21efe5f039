// Anonymous spill files and their reuse pool.
#include "tt/storage/spill_file.h"

#include "tt/common/error.h"

namespace tt {

SpillFile::SpillFile(std::shared_ptr<IoBackend> backend, const std::string& directory)
    : backend_(std::move(backend)), name_("the spill file in '" + directory + "'") {
  if (!backend_) throw Error(ErrorCode::InvalidArgument, "spill file: the backend is null");
  handle_ = backend_->open_for_spill(directory);
}

SpillFile::~SpillFile() { backend_->close(handle_); }

SpillFilePool::SpillFilePool(std::shared_ptr<IoBackend> backend, std::string directory)
    : backend_(std::move(backend)), directory_(std::move(directory)) {
  if (!backend_) throw Error(ErrorCode::InvalidArgument, "spill file pool: the backend is null");
  if (directory_.empty()) throw Error(ErrorCode::InvalidArgument, "spill file pool: the directory is empty");
}

std::shared_ptr<SpillFile> SpillFilePool::acquire() {
  std::shared_ptr<SpillFile> pooled = pool_.acquire([this] { return std::make_unique<SpillFile>(backend_, directory_); });
  SpillFile* file = pooled.get();
  // The caller's handle empties the file before the pooled one returns it to the shelf.
  return std::shared_ptr<SpillFile>(file, [pooled = std::move(pooled)](SpillFile* returned) mutable {
    // ftruncate of a file this process owns fails only on a broken filesystem; its bytes
    // then stay until the pool closes it, and the next call overwrites what it reads.
    (void)returned->empty();
    pooled.reset();
  });
}

}  // namespace tt

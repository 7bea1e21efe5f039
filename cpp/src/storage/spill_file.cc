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
    : backend_(std::move(backend)), directory_(std::move(directory)), shelf_(std::make_shared<Shelf>()) {
  if (!backend_) throw Error(ErrorCode::InvalidArgument, "spill file pool: the backend is null");
  if (directory_.empty()) throw Error(ErrorCode::InvalidArgument, "spill file pool: the directory is empty");
}

std::shared_ptr<SpillFile> SpillFilePool::acquire() {
  std::unique_ptr<SpillFile> file;
  {
    std::lock_guard lock(shelf_->mutex);
    if (!shelf_->free.empty()) {
      file = std::move(shelf_->free.back());
      shelf_->free.pop_back();
    }
  }
  if (!file) {
    file = std::make_unique<SpillFile>(backend_, directory_);
    std::lock_guard lock(shelf_->mutex);
    ++shelf_->created;
  }
  std::weak_ptr<Shelf> shelf = shelf_;
  return std::shared_ptr<SpillFile>(file.release(), [shelf](SpillFile* returned) {
    std::unique_ptr<SpillFile> owned(returned);
    if (auto alive = shelf.lock()) {
      std::lock_guard lock(alive->mutex);
      alive->free.push_back(std::move(owned));
    }
  });
}

std::size_t SpillFilePool::created() const {
  std::lock_guard lock(shelf_->mutex);
  return shelf_->created;
}

}  // namespace tt

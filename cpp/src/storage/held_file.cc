// Named files held open by their reader.
#include "tt/storage/held_file.h"

#include "tt/common/error.h"

namespace tt {

HeldFile::HeldFile(std::shared_ptr<IoBackend> backend, std::string path)
    : backend_(std::move(backend)), path_(std::move(path)) {
  if (!backend_) throw Error(ErrorCode::InvalidArgument, "held file '" + path_ + "': the backend is null");
}

HeldFile::~HeldFile() {
  if (handle_ >= 0) backend_->close(handle_);
}

int HeldFile::handle() {
  std::lock_guard lock(mutex_);
  if (handle_ < 0) handle_ = backend_->open(path_, false);
  return handle_;
}

}  // namespace tt

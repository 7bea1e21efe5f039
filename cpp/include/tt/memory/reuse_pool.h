// Objects kept for reuse: a caller takes one and it comes back when its last handle drops.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace tt {

// A shelf of T, shared by the handles it gives out: a handle returns its object to the shelf
// when it drops, or destroys it when the pool is gone, so handles may outlive the pool.
// Thread-safe.
template <typename T>
class ReusePool {
 public:
  ReusePool() : shelf_(std::make_shared<Shelf>()) {}

  // A pooled object, or make() (a std::unique_ptr<T>) when every pooled one is in use.
  template <typename Make>
  std::shared_ptr<T> acquire(Make make) {
    std::unique_ptr<T> object;
    {
      std::lock_guard lock(shelf_->mutex);
      if (!shelf_->free.empty()) {
        object = std::move(shelf_->free.back());
        shelf_->free.pop_back();
      }
    }
    if (!object) {
      object = make();
      std::lock_guard lock(shelf_->mutex);
      ++shelf_->created;
    }
    std::weak_ptr<Shelf> shelf = shelf_;
    return std::shared_ptr<T>(object.release(), [shelf](T* returned) {
      std::unique_ptr<T> owned(returned);
      if (auto alive = shelf.lock()) {
        std::lock_guard lock(alive->mutex);
        alive->free.push_back(std::move(owned));
      }
    });
  }

  // Objects made so far (in use or pooled).
  std::size_t created() const {
    std::lock_guard lock(shelf_->mutex);
    return shelf_->created;
  }

 private:
  struct Shelf {
    std::mutex mutex;
    std::vector<std::unique_ptr<T>> free;
    std::size_t created = 0;
  };
  std::shared_ptr<Shelf> shelf_;
};

}  // namespace tt

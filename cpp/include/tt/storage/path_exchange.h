// Atomic replacement of one directory tree by another, for publishing artifacts.
#pragma once

#include <string>

namespace tt {

// Atomically swaps the directory entries `a` and `b` (Linux renameat2 RENAME_EXCHANGE):
// a reader sees either the old or the new tree at each path, never neither. Both must
// exist on the same filesystem. Throws Error(IO) naming both paths and the OS reason, or
// Error(Incompatible) where the filesystem or kernel cannot exchange atomically.
void exchange_paths(const std::string& a, const std::string& b);

}  // namespace tt

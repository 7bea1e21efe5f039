// renameat2(RENAME_EXCHANGE) behind a portable signature.
#include "tt/storage/path_exchange.h"

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <cstring>

#include "tt/common/error.h"

namespace tt {

void exchange_paths(const std::string& a, const std::string& b) {
#if defined(__linux__) && defined(RENAME_EXCHANGE)
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return;
  const int error = errno;
  const std::string what = "exchange '" + a + "' and '" + b + "': " + std::strerror(error);
  if (error == EINVAL || error == ENOSYS) throw Error(ErrorCode::Incompatible, what);
  throw Error(ErrorCode::IO, what);
#else
  throw Error(ErrorCode::Incompatible, "exchange '" + a + "' and '" + b + "': needs Linux renameat2");
#endif
}

}  // namespace tt

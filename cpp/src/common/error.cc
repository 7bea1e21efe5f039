// Names of error codes and the construction of tt::Error.
#include "tt/common/error.h"

#include <cstring>

namespace tt {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::NotFound: return "NotFound";
    case ErrorCode::ResourceExhausted: return "ResourceExhausted";
    case ErrorCode::Incompatible: return "Incompatible";
    case ErrorCode::DataCorruption: return "DataCorruption";
    case ErrorCode::IO: return "IO";
    case ErrorCode::Cancelled: return "Cancelled";
    case ErrorCode::Stalled: return "Stalled";
    case ErrorCode::Internal: return "Internal";
  }
  // Reachable only through a cast from an out-of-range integer (e.g. from the bindings).
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

void throw_os_error(const std::string& action, const std::string& path, int error, ErrorCode code) {
  throw Error(code, action + " '" + path + "': " + std::strerror(error));
}

}  // namespace tt

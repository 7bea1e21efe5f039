// The one error type of the C++ core: a code plus a message naming what was expected and given.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace tt {

// Why an operation failed. The bindings map each code to one Python exception class
// (python/tensortorrent/errors.py); a test pins that mapping, so add codes at the end.
enum class ErrorCode {
  InvalidArgument,    // the caller passed something malformed (a bad schedule, a bad option)
  NotFound,           // a named thing does not exist
  ResourceExhausted,  // a memory or capacity budget cannot be met
  Incompatible,       // valid input that this build or machine cannot run
  DataCorruption,     // stored bytes fail an integrity check
  IO,                 // the operating system refused a read or write
  Cancelled,          // the caller asked the run to stop
  Stalled,            // no progress within the stall timeout
  Internal,           // a broken invariant inside the core: a bug
};

// Stable name of a code ("InvalidArgument", ...), used by the bindings and in messages.
std::string_view error_code_name(ErrorCode code);

// Exception for failures that end an operation. Thread-safe to copy; immutable.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);

  // What kind of failure this is.
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Throws the Error for an operating-system call on `path` that failed with errno `error`:
// `code` (IO unless the caller knows better) and a message naming the action, the path and
// strerror, such as "open 'a/b': No such file or directory".
[[noreturn]] void throw_os_error(const std::string& action, const std::string& path, int error,
                                 ErrorCode code = ErrorCode::IO);

}  // namespace tt

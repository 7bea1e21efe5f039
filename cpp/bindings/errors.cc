// The one place where C++ errors become Python exceptions.
//
// Each tt::ErrorCode maps to a class of python/tensortorrent/errors.py, looked up there by
// the code's name, so the Python hierarchy stays the single source of user-facing types.
#include <string>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "tt/common/error.h"

namespace nb = nanobind;

namespace tt::bindings {
namespace {

constexpr ErrorCode kAllCodes[] = {
    ErrorCode::InvalidArgument, ErrorCode::NotFound, ErrorCode::ResourceExhausted,
    ErrorCode::Incompatible,    ErrorCode::DataCorruption, ErrorCode::IO,
    ErrorCode::Cancelled,       ErrorCode::Stalled,        ErrorCode::Internal,
};

void translate(const std::exception_ptr& pending, void*) {
  try {
    std::rethrow_exception(pending);
  } catch (const Error& error) {
    nb::object errors = nb::module_::import_("tensortorrent.errors");
    nb::object cls = errors.attr("native_error_class")(std::string(error_code_name(error.code())));
    PyErr_SetString(cls.ptr(), error.what());
  }
}

ErrorCode code_from_name(const std::string& name) {
  for (ErrorCode code : kAllCodes) {
    if (error_code_name(code) == name) return code;
  }
  throw nb::value_error(("unknown error code '" + name + "'").c_str());
}

}  // namespace

void bind_errors(nb::module_& m) {
  nb::register_exception_translator(translate);

  m.def("error_code_names", [] {
    std::vector<std::string> names;
    for (ErrorCode code : kAllCodes) names.emplace_back(error_code_name(code));
    return names;
  }, "Names of every native error code, in declaration order.");

  // Lets the tests pin the code -> exception class mapping end to end.
  m.def("raise_native_error", [](const std::string& code, const std::string& message) {
    throw Error(code_from_name(code), message);
  }, nb::arg("code"), nb::arg("message"));
}

}  // namespace tt::bindings

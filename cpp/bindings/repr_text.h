// Text helpers shared by the bindings' __repr__ implementations.
#pragma once

#include <cstdio>
#include <string>

namespace tt::bindings {

// A number as Python users expect to read it: six significant digits, no trailing noise.
inline std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

}  // namespace tt::bindings

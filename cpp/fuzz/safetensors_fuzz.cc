// libFuzzer target of the safetensors header parser and the JSON reader under it (make fuzz).
//
// Every input is a whole "file": a tt::Error is the expected way to refuse one; any other
// exception, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "tt/common/error.h"
#include "tt/storage/json_reader.h"
#include "tt/storage/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const tt::SafetensorsHeader header = tt::parse_safetensors_header("fuzz", std::span(data, size), size);
    // Invariants of an accepted header: tensors tile the data section, which ends the file.
    std::uint64_t covered = 0;
    for (const tt::TensorEntry& entry : header.tensors) {
      if (entry.begin != covered || entry.end < entry.begin) std::abort();
      covered = entry.end;
      if (header.find(entry.name).begin != entry.begin) std::abort();
    }
    if (header.data_offset != 8 + header.header_bytes || header.data_offset + covered != size) std::abort();
  } catch (const tt::Error&) {
  }
  // The JSON grammar on its own, past the schema's early refusals.
  try {
    tt::JsonReader json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", 0);
    json.skip_value();
    json.finish();
  } catch (const tt::Error&) {
  }
  return 0;
}

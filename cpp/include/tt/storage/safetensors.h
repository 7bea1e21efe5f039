// Reading and validating the header of a safetensors file, as strictly as the reference Rust parser or more.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tt {

// Element types of safetensors 0.8, named as in the file. Sub-byte types (F4, F6_*) pack
// elements across bytes; a tensor of them must fill whole bytes. Values are stable: add at the end.
enum class DType : std::int32_t {
  F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, U16, U32, U64,
  F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, C64, F4, F6_E2M3, F6_E3M2,
};

// Every DType, in declaration order.
std::span<const DType> all_dtypes();

// The name the file uses for `dtype` ("F32", "F8_E4M3", ...).
std::string_view dtype_name(DType dtype);

// Bits one element occupies (4 for F4, 6 for F6_*, 8 * bytes for the others).
int dtype_bits(DType dtype);

// The DType the file calls `name` (case-sensitive, as the reference), or nullopt.
std::optional<DType> dtype_from_name(std::string_view name);

// One tensor of the header. Offsets count bytes from the start of the data section.
struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;  // each dimension >= 0; empty for a scalar
  std::uint64_t begin;              // first byte, relative to the data section
  std::uint64_t end;                // one past the last byte; end - begin is the tensor's size
  std::uint64_t entry_at = 0;       // the file's byte where its header entry begins (for messages)
};

// A validated header: tensors tile the data section exactly, and the data section ends at
// the end of the file. Immutable after parsing, so any number of threads may read it.
struct SafetensorsHeader {
  std::string file_label;                                      // the file, as named in messages
  std::uint64_t header_bytes;                                  // N: the JSON's length, padding included
  std::uint64_t data_offset;                                   // 8 + N: where the data section starts
  std::vector<TensorEntry> tensors;                            // sorted by (begin, end, name)
  std::vector<std::pair<std::string, std::string>> metadata;  // "__metadata__", sorted by key

  // The tensor called `name` (a linear search); throws Error(NotFound) naming it and the file.
  const TensorEntry& find(std::string_view name) const;
};

// The largest JSON header accepted, as the reference's MAX_HEADER_SIZE: bigger is corruption.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// N from the first 8 bytes of a file of `file_size` bytes, checked before anything is sized
// from it: at most kMaxSafetensorsHeaderBytes and 8 + N <= file_size. Throws
// Error(DataCorruption) naming `file_label` otherwise, or when the file is under 8 bytes;
// Error(InvalidArgument) when `first_bytes` holds fewer than min(8, file_size) bytes.
std::uint64_t safetensors_header_length(std::string_view file_label, std::span<const std::uint8_t> first_bytes,
                                        std::uint64_t file_size);

// Parses and validates the header at the start of a file of `file_size` bytes, given its
// first bytes (at least 8 + N of them; more are ignored). Throws Error(DataCorruption) naming
// `file_label`, the tensor and the byte where the file breaks a rule (see storage/README.md),
// and Error(InvalidArgument) when `prefix_bytes` is shorter than the header or longer than the file.
SafetensorsHeader parse_safetensors_header(std::string_view file_label, std::span<const std::uint8_t> prefix_bytes,
                                           std::uint64_t file_size);

// Opens `path`, reads exactly its 8 + N header bytes with pread (never the data section)
// and validates them as parse_safetensors_header. Throws Error(NotFound) for a missing file,
// Error(IO) when the OS refuses to open or read it, and the parser's errors.
SafetensorsHeader read_safetensors_header(const std::string& path);

}  // namespace tt

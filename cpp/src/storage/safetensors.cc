// The safetensors header: its schema over the JSON reader, and the layout rules of the tensors it lists.
#include "tt/storage/safetensors.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "tt/common/error.h"
#include "tt/storage/json_reader.h"

namespace tt {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int bits;
};

// Indexed by the enum's value (checked below), so lookups by DType need no search.
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 64},
    {DType::F32, "F32", 32},
    {DType::F16, "F16", 16},
    {DType::BF16, "BF16", 16},
    {DType::I64, "I64", 64},
    {DType::I32, "I32", 32},
    {DType::I16, "I16", 16},
    {DType::I8, "I8", 8},
    {DType::U8, "U8", 8},
    {DType::BOOL, "BOOL", 8},
    {DType::F8_E4M3, "F8_E4M3", 8},
    {DType::F8_E5M2, "F8_E5M2", 8},
    {DType::U16, "U16", 16},
    {DType::U32, "U32", 32},
    {DType::U64, "U64", 64},
    {DType::F8_E8M0, "F8_E8M0", 8},
    {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {DType::C64, "C64", 64},
    {DType::F4, "F4", 4},
    {DType::F6_E2M3, "F6_E2M3", 6},
    {DType::F6_E3M2, "F6_E3M2", 6},
};

constexpr auto kAllDTypes = [] {
  std::array<DType, std::size(kDTypes)> all{};
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = kDTypes[i].dtype;
  return all;
}();

constexpr bool table_is_indexed_by_value() {
  for (std::size_t i = 0; i < std::size(kDTypes); ++i) {
    if (static_cast<std::size_t>(kDTypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(table_is_indexed_by_value(), "kDTypes must list DType values in declaration order");

const DTypeInfo& info(DType dtype) { return kDTypes[static_cast<std::size_t>(dtype)]; }

[[noreturn]] void corrupt(std::string_view label, const std::string& what) {
  throw Error(ErrorCode::DataCorruption, std::string(label) + ": " + what);
}

// "tensor 'name'", the subject of most messages (the reader or corrupt() adds the file).
std::string tensor_text(const std::string& name) { return "tensor " + quote_for_message(name); }

// "tensor 'name' (its entry at byte N)", for faults of an entry read whole.
std::string entry_text(const TensorEntry& entry) {
  return tensor_text(entry.name) + " (its entry at byte " + std::to_string(entry.entry_at) + ")";
}

// A non-negative integer element of a shape or offsets array, described by `what`.
std::uint64_t read_unsigned(JsonReader& json, std::string_view label, const std::string& what) {
  const JsonKind kind = json.peek();
  if (kind != JsonKind::Number) {
    json.fail(what + " is " + std::string(json_kind_name(kind)) + ", expected a non-negative integer");
  }
  const std::uint64_t at = json.offset();
  const JsonNumber number = json.read_number();
  if (!number.unsigned_value) {
    // Signs, fractions, exponents and values past 2^64 - 1: the reference refuses them all too.
    corrupt(label, what + " is " + std::string(number.text) +
                       ", expected a non-negative integer below 2^64, at byte " + std::to_string(at));
  }
  return *number.unsigned_value;
}

constexpr std::string_view kEntryKeys = " (an entry holds exactly dtype, shape and data_offsets)";

TensorEntry read_tensor(JsonReader& json, std::string_view label, std::string name) {
  const std::string where = tensor_text(name);
  TensorEntry entry{std::move(name), DType::U8, {}, 0, 0, json.offset()};
  const JsonKind kind = json.peek();
  if (kind != JsonKind::Object) {
    json.fail(where + " is " + std::string(json_kind_name(kind)) + ", expected an object" + std::string(kEntryKeys));
  }
  bool has_dtype = false, has_shape = false, has_offsets = false;
  json.begin_object();
  std::string key;
  while (json.next_member(key)) {
    if (key == "dtype") {
      const std::uint64_t at = json.offset();
      const std::string dtype_text = json.read_string();
      const std::optional<DType> dtype = dtype_from_name(dtype_text);
      if (!dtype) {
        corrupt(label, where + ": unknown dtype " + quote_for_message(dtype_text) + " at byte " + std::to_string(at));
      }
      entry.dtype = *dtype;
      has_dtype = true;
    } else if (key == "shape") {
      json.begin_array();
      while (json.next_element()) {
        const std::string what = where + ": shape[" + std::to_string(entry.shape.size()) + "]";
        const std::uint64_t at = json.offset();
        const std::uint64_t dim = read_unsigned(json, label, what);
        // The reference takes any usize; int64 dimensions are what every framework can hold.
        if (dim > static_cast<std::uint64_t>(INT64_MAX)) {
          corrupt(label, what + " is " + std::to_string(dim) + ", above 2^63 - 1, at byte " + std::to_string(at));
        }
        entry.shape.push_back(static_cast<std::int64_t>(dim));
      }
      has_shape = true;
    } else if (key == "data_offsets") {
      std::uint64_t offsets[2] = {0, 0};
      std::size_t count = 0;
      json.begin_array();
      while (json.next_element()) {
        if (count == 2) json.fail(where + ": data_offsets has more than 2 elements");
        offsets[count] = read_unsigned(json, label, where + ": data_offsets[" + std::to_string(count) + "]");
        ++count;
      }
      if (count != 2) json.fail(where + ": data_offsets has " + std::to_string(count) + " elements, expected 2");
      entry.begin = offsets[0];
      entry.end = offsets[1];
      has_offsets = true;
    } else {
      // The reference ignores unknown keys; a header this reader cannot fully explain is refused.
      json.fail(where + ": unknown key " + quote_for_message(key) + std::string(kEntryKeys));
    }
  }
  if (!has_dtype || !has_shape || !has_offsets) {
    corrupt(label, where + " has no " + (!has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets") +
                       std::string(kEntryKeys));
  }
  return entry;
}

void read_metadata(JsonReader& json, SafetensorsHeader& header) {
  // The reference reads "__metadata__": null as no metadata; so do we.
  if (json.peek() == JsonKind::Null) return json.read_null();
  const JsonKind kind = json.peek();
  if (kind != JsonKind::Object) {
    json.fail("__metadata__ is " + std::string(json_kind_name(kind)) + ", expected an object of strings");
  }
  json.begin_object();
  std::string key;
  while (json.next_member(key)) {
    const JsonKind value_kind = json.peek();
    if (value_kind != JsonKind::String) {
      json.fail("__metadata__ value of " + quote_for_message(key) + " is " + std::string(json_kind_name(value_kind)) +
                ", expected a string");
    }
    header.metadata.emplace_back(key, json.read_string());
  }
  std::sort(header.metadata.begin(), header.metadata.end());
}

// Size in bytes of `entry`'s elements, with every product checked, in the reference's order.
std::uint64_t tensor_bytes(std::string_view label, const TensorEntry& entry) {
  std::uint64_t elements = 1;
  for (std::int64_t dim : entry.shape) {
    if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(dim), &elements)) {
      corrupt(label, entry_text(entry) + ": the element count of its shape overflows 64 bits");
    }
  }
  std::uint64_t bits = 0;
  if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(dtype_bits(entry.dtype)), &bits)) {
    corrupt(label, entry_text(entry) + ": its size in bits overflows 64 bits");
  }
  if (bits % 8 != 0) {
    corrupt(label, entry_text(entry) + ": " + std::to_string(elements) + " elements of " +
                       std::string(dtype_name(entry.dtype)) + " do not fill whole bytes");
  }
  return bits / 8;
}

std::string offsets_text(const TensorEntry& entry) {
  return "data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) + "]";
}

void validate_layout(std::string_view label, SafetensorsHeader& header, std::uint64_t file_size) {
  for (const TensorEntry& entry : header.tensors) {
    if (entry.end < entry.begin) {
      corrupt(label, entry_text(entry) + ": " + offsets_text(entry) + " end before they begin");
    }
    const std::uint64_t bytes = tensor_bytes(label, entry);
    if (entry.end - entry.begin != bytes) {
      corrupt(label, entry_text(entry) + ": " + offsets_text(entry) + " span " +
                         std::to_string(entry.end - entry.begin) + " bytes but its shape of " +
                         std::string(dtype_name(entry.dtype)) + " needs " + std::to_string(bytes));
    }
  }
  // The reference sorts by (begin, end); the name only makes ties of empty tensors deterministic.
  std::sort(header.tensors.begin(), header.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t covered = 0;
  for (const TensorEntry& entry : header.tensors) {
    if (entry.begin != covered) {
      corrupt(label, tensor_text(entry.name) + ": data begins at byte " + std::to_string(entry.begin) +
                         " of the data section but the tensors before it end at byte " + std::to_string(covered) +
                         (entry.begin > covered ? " (a gap)" : " (an overlap)"));
    }
    covered = entry.end;
  }
  const std::uint64_t data_bytes = file_size - header.data_offset;  // data_offset <= file_size was checked
  if (covered != data_bytes) {
    const std::string subject =
        header.tensors.empty()
            ? std::string("the header lists no tensors, so data ends at byte 0")
            : tensor_text(header.tensors.back().name) + ": data ends at byte " + std::to_string(covered);
    corrupt(label, subject + " but the data section holds " + std::to_string(data_bytes) + " bytes (the file's " +
                       std::to_string(file_size) + " minus the " + std::to_string(header.data_offset) +
                       " before the data)");
  }
}

}  // namespace

std::span<const DType> all_dtypes() { return kAllDTypes; }

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

int dtype_bits(DType dtype) { return info(dtype).bits; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

const TensorEntry& SafetensorsHeader::find(std::string_view name) const {
  for (const TensorEntry& entry : tensors) {
    if (entry.name == name) return entry;
  }
  throw Error(ErrorCode::NotFound, file_label + ": no " + tensor_text(std::string(name)) + " among its " +
                                       std::to_string(tensors.size()) + " tensors");
}

std::uint64_t safetensors_header_length(std::string_view file_label, std::span<const std::uint8_t> first_bytes,
                                        std::uint64_t file_size) {
  if (file_size < 8) {
    corrupt(file_label, "the file holds " + std::to_string(file_size) +
                            " bytes, fewer than the 8 of the header length");
  }
  if (first_bytes.size() < 8) {
    throw Error(ErrorCode::InvalidArgument, std::string(file_label) + ": given " + std::to_string(first_bytes.size()) +
                                                " bytes, fewer than the 8 of the header length");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first_bytes[static_cast<std::size_t>(i)];
  if (n > kMaxSafetensorsHeaderBytes) {
    corrupt(file_label, "header length " + std::to_string(n) + " (bytes 0-7) is above the limit of " +
                            std::to_string(kMaxSafetensorsHeaderBytes));
  }
  if (8 + n > file_size) {
    corrupt(file_label, "header length " + std::to_string(n) + " (bytes 0-7) runs to byte " + std::to_string(8 + n) +
                            " but the file holds " + std::to_string(file_size) + " bytes");
  }
  return n;
}

SafetensorsHeader parse_safetensors_header(std::string_view file_label, std::span<const std::uint8_t> prefix_bytes,
                                           std::uint64_t file_size) {
  if (prefix_bytes.size() > file_size) {
    throw Error(ErrorCode::InvalidArgument, std::string(file_label) + ": given " +
                                                std::to_string(prefix_bytes.size()) + " bytes of a file of " +
                                                std::to_string(file_size));
  }
  const std::uint64_t n = safetensors_header_length(file_label, prefix_bytes, file_size);
  if (prefix_bytes.size() < 8 + n) {
    throw Error(ErrorCode::InvalidArgument, std::string(file_label) + ": given " +
                                                std::to_string(prefix_bytes.size()) + " bytes but the header needs " +
                                                std::to_string(8 + n));
  }
  SafetensorsHeader header{std::string(file_label), n, 8 + n, {}, {}};
  const std::string_view text(reinterpret_cast<const char*>(prefix_bytes.data()) + 8, n);
  JsonReader json(text, std::string(file_label), 8);
  const JsonKind kind = json.peek();
  if (kind != JsonKind::Object) {
    json.fail("the header is " + std::string(json_kind_name(kind)) + ", expected a JSON object");
  }
  json.begin_object();
  std::string key;
  while (json.next_member(key)) {
    if (key == "__metadata__") {
      read_metadata(json, header);
    } else {
      header.tensors.push_back(read_tensor(json, file_label, key));
    }
  }
  json.finish();
  validate_layout(file_label, header, file_size);
  return header;
}

}  // namespace tt

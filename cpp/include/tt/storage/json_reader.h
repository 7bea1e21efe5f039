// A strict pull reader of one JSON text, for parsers of untrusted headers that know the schema they expect.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace tt {

// The kind of the next value of a JsonReader, judged from its first byte.
enum class JsonKind { Object, Array, String, Number, True, False, Null, Invalid };

// Lower-case English name of a kind ("an object", "a string", ...), for messages.
std::string_view json_kind_name(JsonKind kind);

// `text` in single quotes for an error message: control characters, quotes and backslashes
// escaped as \xNN, and cut after 120 bytes, since names come from untrusted files.
std::string quote_for_message(std::string_view text);

// A number as written, and its value when it is a plain non-negative integer (no sign,
// fraction or exponent) that fits in 64 bits; a number like that is all a header needs.
struct JsonNumber {
  std::string_view text;
  std::optional<std::uint64_t> unsigned_value;
};

// Byte offset of the first byte of `text` that is not part of well-formed UTF-8 (overlong
// forms, surrogates and code points past U+10FFFF are malformed), or npos when all of it is.
std::size_t utf8_error_offset(std::string_view text);

// Reads RFC 8259 JSON from a caller-owned text without building a tree, so memory stays
// proportional to what the caller keeps. Strict: no comments, trailing commas, leading
// zeros, lone surrogates, raw control characters or duplicate keys in one object; nesting
// deeper than kMaxDepth is refused rather than recursed into. Every failure throws
// Error(DataCorruption) "<label>: <what> at byte <offset>", where the offset counts from
// `base_offset` (the text's position in its file). One reader is used by one thread.
class JsonReader {
 public:
  // Objects and arrays open at once, at most; a real header needs three.
  static constexpr int kMaxDepth = 64;

  // Validates `text` as UTF-8 (throws naming the first bad byte); `text` must outlive the reader.
  JsonReader(std::string_view text, std::string label, std::uint64_t base_offset);

  // Skips whitespace and says what the next value is; consumes nothing else.
  JsonKind peek();

  // Consumes '{' (throws if the next value is not an object).
  void begin_object();

  // Moves to the next member of the innermost open object: stores its decoded key and
  // consumes the ':' so the value can be read next. False (with the '}' consumed) at the end.
  bool next_member(std::string& key);

  // Consumes '[' (throws if the next value is not an array).
  void begin_array();

  // Moves to the next element of the innermost open array; false (with ']' consumed) at the end.
  bool next_element();

  // Reads a string value, decoding escapes (\uXXXX with surrogate pairs) into UTF-8.
  std::string read_string();

  // Reads a number value; its text must follow the JSON number grammar.
  JsonNumber read_number();

  // Reads `null`.
  void read_null();

  // Reads and discards the next value of any kind, nested ones included.
  void skip_value();

  // Checks that nothing but whitespace follows the value read, and that no container is open.
  void finish();

  // Offset in the file of the next unread byte: where the value peek() saw begins.
  std::uint64_t offset() const { return base_offset_ + position_; }

  // Throws Error(DataCorruption) "<label>: <what> at byte <offset()>".
  [[noreturn]] void fail(const std::string& what) const;

 private:
  void skip_whitespace();
  void expect_literal(std::string_view word);
  void open_container(bool is_object);
  void close_container();
  std::uint32_t read_hex4();
  void append_utf8(std::string& out, std::uint32_t code_point);

  std::string_view text_;
  std::string label_;
  std::uint64_t base_offset_;
  std::size_t position_ = 0;
  // One entry per open container: whether a member or element was read yet (so the next
  // needs a comma), and for objects the keys seen, to refuse duplicates.
  struct Open {
    bool is_object;
    bool has_items;
    std::unordered_set<std::string> keys;
  };
  std::vector<Open> open_;
};

}  // namespace tt

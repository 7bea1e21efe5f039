// The strict JSON pull reader: byte-level grammar, escapes and UTF-8 checks of untrusted text.
#include "tt/storage/json_reader.h"

#include <utility>

#include "tt/common/error.h"

namespace tt {
namespace {

bool is_whitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::string_view json_kind_name(JsonKind kind) {
  switch (kind) {
    case JsonKind::Object: return "an object";
    case JsonKind::Array: return "an array";
    case JsonKind::String: return "a string";
    case JsonKind::Number: return "a number";
    case JsonKind::True:
    case JsonKind::False: return "a boolean";
    case JsonKind::Null: return "null";
    case JsonKind::Invalid: break;
  }
  return "no JSON value";
}

std::string quote_for_message(std::string_view text) {
  // Names come from untrusted files: keep messages one line and bounded.
  constexpr std::size_t kMaxShown = 120;
  std::size_t shown = text.size() < kMaxShown ? text.size() : kMaxShown;
  // Cut on a character boundary, so the message stays valid UTF-8 for Python.
  while (shown < text.size() && shown > 0 && (static_cast<unsigned char>(text[shown]) & 0xc0) == 0x80) --shown;
  std::string out = "'";
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (shown < text.size()) out += "...";
  return out + "'";
}

std::size_t utf8_error_offset(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t size = text.size();
  std::size_t i = 0;
  while (i < size) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // Table 3-7 of the Unicode standard: the second byte's range depends on the lead byte,
    // which is what excludes overlong forms, surrogates and values past U+10FFFF.
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead == 0xe0) low = 0xa0;
      if (lead == 0xed) high = 0x9f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead == 0xf0) low = 0x90;
      if (lead == 0xf4) high = 0x8f;
    } else {
      return i;
    }
    if (size - i < length) return i;
    if (bytes[i + 1] < low || bytes[i + 1] > high) return i;
    for (std::size_t k = 2; k < length; ++k) {
      if (bytes[i + k] < 0x80 || bytes[i + k] > 0xbf) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

JsonReader::JsonReader(std::string_view text, std::string label, std::uint64_t base_offset)
    : text_(text), label_(std::move(label)), base_offset_(base_offset) {
  const std::size_t bad = utf8_error_offset(text_);
  if (bad != std::string_view::npos) {
    position_ = bad;
    fail("the header is not valid UTF-8");
  }
}

void JsonReader::fail(const std::string& what) const {
  throw Error(ErrorCode::DataCorruption, label_ + ": " + what + " at byte " + std::to_string(offset()));
}

void JsonReader::skip_whitespace() {
  while (position_ < text_.size() && is_whitespace(text_[position_])) ++position_;
}

JsonKind JsonReader::peek() {
  skip_whitespace();
  if (position_ >= text_.size()) return JsonKind::Invalid;
  const char c = text_[position_];
  switch (c) {
    case '{': return JsonKind::Object;
    case '[': return JsonKind::Array;
    case '"': return JsonKind::String;
    case 't': return JsonKind::True;
    case 'f': return JsonKind::False;
    case 'n': return JsonKind::Null;
    default: return c == '-' || is_digit(c) ? JsonKind::Number : JsonKind::Invalid;
  }
}

void JsonReader::open_container(bool is_object) {
  if (open_.size() >= static_cast<std::size_t>(kMaxDepth)) {
    fail("JSON nested deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  ++position_;
  open_.push_back(Open{is_object, false, {}});
}

void JsonReader::close_container() {
  ++position_;
  open_.pop_back();
}

void JsonReader::begin_object() {
  const JsonKind kind = peek();
  if (kind != JsonKind::Object) fail("expected an object, found " + std::string(json_kind_name(kind)));
  open_container(true);
}

void JsonReader::begin_array() {
  const JsonKind kind = peek();
  if (kind != JsonKind::Array) fail("expected an array, found " + std::string(json_kind_name(kind)));
  open_container(false);
}

bool JsonReader::next_member(std::string& key) {
  if (open_.empty() || !open_.back().is_object) {
    throw Error(ErrorCode::Internal, "JsonReader::next_member outside an object");
  }
  skip_whitespace();
  const bool has_items = open_.back().has_items;
  if (position_ < text_.size() && text_[position_] == '}') {
    close_container();
    return false;
  }
  if (has_items) {
    if (position_ >= text_.size() || text_[position_] != ',') fail("expected ',' or '}' after an object member");
    ++position_;
    skip_whitespace();
  }
  if (position_ >= text_.size() || text_[position_] != '"') {
    fail(has_items ? "expected a key after ','" : "expected a key or '}'");
  }
  const std::size_t key_position = position_;
  key = read_string();
  if (!open_.back().keys.insert(key).second) {
    position_ = key_position;
    fail("duplicate key " + quote_for_message(key));
  }
  skip_whitespace();
  if (position_ >= text_.size() || text_[position_] != ':') fail("expected ':' after a key");
  ++position_;
  open_.back().has_items = true;
  return true;
}

bool JsonReader::next_element() {
  if (open_.empty() || open_.back().is_object) {
    throw Error(ErrorCode::Internal, "JsonReader::next_element outside an array");
  }
  skip_whitespace();
  if (position_ < text_.size() && text_[position_] == ']') {
    close_container();
    return false;
  }
  if (open_.back().has_items) {
    if (position_ >= text_.size() || text_[position_] != ',') fail("expected ',' or ']' after an array element");
    ++position_;
    skip_whitespace();
    if (position_ < text_.size() && text_[position_] == ']') fail("trailing comma before ']'");
  }
  open_.back().has_items = true;
  return true;
}

std::uint32_t JsonReader::read_hex4() {
  if (text_.size() - position_ < 4) fail("truncated \\u escape");
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = text_[position_];
    std::uint32_t digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<std::uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<std::uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<std::uint32_t>(c - 'A' + 10);
    } else {
      fail("bad hex digit in a \\u escape");
    }
    value = value * 16 + digit;
    ++position_;
  }
  return value;
}

void JsonReader::append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string JsonReader::read_string() {
  const JsonKind kind = peek();
  if (kind != JsonKind::String) fail("expected a string, found " + std::string(json_kind_name(kind)));
  ++position_;
  std::string out;
  for (;;) {
    if (position_ >= text_.size()) fail("unterminated string");
    const char c = text_[position_];
    if (c == '"') {
      ++position_;
      return out;
    }
    if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in a string");
    if (c != '\\') {
      // Bytes at or above 0x80 were checked as UTF-8 by the constructor.
      out += c;
      ++position_;
      continue;
    }
    const std::size_t escape_position = position_;
    ++position_;
    if (position_ >= text_.size()) fail("unterminated string");
    const char e = text_[position_++];
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        std::uint32_t cp = read_hex4();
        if (cp >= 0xdc00 && cp <= 0xdfff) {
          position_ = escape_position;
          fail("lone low surrogate in a \\u escape");
        }
        if (cp >= 0xd800 && cp <= 0xdbff) {
          // A high surrogate must be followed at once by an escaped low one.
          if (text_.size() - position_ < 2 || text_[position_] != '\\' || text_[position_ + 1] != 'u') {
            position_ = escape_position;
            fail("lone high surrogate in a \\u escape");
          }
          position_ += 2;
          const std::uint32_t low = read_hex4();
          if (low < 0xdc00 || low > 0xdfff) {
            position_ = escape_position;
            fail("high surrogate not followed by a low surrogate");
          }
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        }
        append_utf8(out, cp);
        break;
      }
      default:
        position_ = escape_position;
        fail("invalid escape in a string");
    }
  }
}

JsonNumber JsonReader::read_number() {
  const JsonKind kind = peek();
  if (kind != JsonKind::Number) fail("expected a number, found " + std::string(json_kind_name(kind)));
  const std::size_t start = position_;
  const auto digits_from = [&] {
    const std::size_t first = position_;
    while (position_ < text_.size() && is_digit(text_[position_])) ++position_;
    return position_ - first;
  };
  bool plain = true;
  if (text_[position_] == '-') {
    plain = false;
    ++position_;
  }
  if (position_ < text_.size() && text_[position_] == '0') {
    ++position_;  // a leading zero stands alone; "01" leaves '1' for the caller to refuse
  } else if (digits_from() == 0) {
    fail("invalid number");
  }
  if (position_ < text_.size() && text_[position_] == '.') {
    plain = false;
    ++position_;
    if (digits_from() == 0) fail("invalid number: no digits after '.'");
  }
  if (position_ < text_.size() && (text_[position_] == 'e' || text_[position_] == 'E')) {
    plain = false;
    ++position_;
    if (position_ < text_.size() && (text_[position_] == '+' || text_[position_] == '-')) ++position_;
    if (digits_from() == 0) fail("invalid number: no digits in the exponent");
  }
  JsonNumber number{text_.substr(start, position_ - start), std::nullopt};
  if (plain) {
    std::uint64_t value = 0;
    bool fits = true;
    for (char c : number.text) {
      const auto digit = static_cast<std::uint64_t>(c - '0');
      if (value > (UINT64_MAX - digit) / 10) {
        fits = false;
        break;
      }
      value = value * 10 + digit;
    }
    if (fits) number.unsigned_value = value;
  }
  return number;
}

void JsonReader::expect_literal(std::string_view word) {
  if (text_.substr(position_, word.size()) != word) fail("invalid literal");
  position_ += word.size();
}

void JsonReader::read_null() {
  const JsonKind kind = peek();
  if (kind != JsonKind::Null) fail("expected null, found " + std::string(json_kind_name(kind)));
  expect_literal("null");
}

void JsonReader::skip_value() {
  std::string key;
  switch (peek()) {
    case JsonKind::Object:
      begin_object();
      while (next_member(key)) skip_value();
      return;
    case JsonKind::Array:
      begin_array();
      while (next_element()) skip_value();
      return;
    case JsonKind::String: read_string(); return;
    case JsonKind::Number: read_number(); return;
    case JsonKind::True: expect_literal("true"); return;
    case JsonKind::False: expect_literal("false"); return;
    case JsonKind::Null: expect_literal("null"); return;
    case JsonKind::Invalid: break;
  }
  fail(position_ >= text_.size() ? "expected a value, found the end of the header" : "expected a JSON value");
}

void JsonReader::finish() {
  if (!open_.empty()) throw Error(ErrorCode::Internal, "JsonReader::finish with a container open");
  skip_whitespace();
  if (position_ != text_.size()) fail("trailing characters after the JSON value");
}

}  // namespace tt

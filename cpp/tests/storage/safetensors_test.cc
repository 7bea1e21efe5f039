// Tests of the safetensors header reader: valid headers, a catalogue of broken files, the JSON reader and file I/O.
#include "tt/storage/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io_test_support.h"
#include "tt/common/error.h"
#include "tt/storage/json_reader.h"

namespace tt {
namespace {

using test::TempDir;

// The 8-byte little-endian length `n` followed by `header` and `data`.
std::string file_with_length(std::uint64_t n, const std::string& header, const std::string& data = "") {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((n >> (8 * i)) & 0xff);
  return bytes + header + data;
}

// A file whose length field is the true length of `header`.
std::string file_of(const std::string& header, const std::string& data = "") {
  return file_with_length(header.size(), header, data);
}

// One tensor entry's JSON.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, std::uint64_t begin,
                  std::uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

SafetensorsHeader parse(const std::string& bytes) {
  return parse_safetensors_header("model.safetensors",
                                  std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()),
                                  bytes.size());
}

// --- Valid headers -----------------------------------------------------------------------

TEST(SafetensorsTest, ParsesTensorsSortedByOffsetWithTheirFields) {
  const std::string header = "{" + entry("b", "F32", "[2,3]", 8, 32) + "," + entry("a", "I64", "[1]", 0, 8) + "}";
  const SafetensorsHeader parsed = parse(file_of(header, std::string(32, '\0')));
  EXPECT_EQ(parsed.header_bytes, header.size());
  EXPECT_EQ(parsed.data_offset, 8 + header.size());
  ASSERT_EQ(parsed.tensors.size(), 2u);
  EXPECT_EQ(parsed.tensors[0].name, "a");
  EXPECT_EQ(parsed.tensors[0].dtype, DType::I64);
  EXPECT_EQ(parsed.tensors[0].shape, std::vector<std::int64_t>{1});
  EXPECT_EQ(parsed.tensors[1].name, "b");
  EXPECT_EQ(parsed.tensors[1].shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(parsed.tensors[1].begin, 8u);
  EXPECT_EQ(parsed.tensors[1].end, 32u);
  EXPECT_TRUE(parsed.metadata.empty());
  EXPECT_EQ(&parsed.find("b"), &parsed.tensors[1]);
}

TEST(SafetensorsTest, ZeroTensorsWithAnEmptyDataSectionIsValid) {
  EXPECT_TRUE(parse(file_of("{}")).tensors.empty());
}

TEST(SafetensorsTest, ScalarAndZeroElementTensors) {
  const std::string header = "{" + entry("s", "F64", "[]", 0, 8) + "," + entry("z", "F32", "[3,0,2]", 8, 8) + "}";
  const SafetensorsHeader parsed = parse(file_of(header, std::string(8, '\0')));
  EXPECT_TRUE(parsed.find("s").shape.empty());
  EXPECT_EQ(parsed.find("z").begin, parsed.find("z").end);
}

TEST(SafetensorsTest, MetadataIsSortedByKeyAndNullMeansNone) {
  const SafetensorsHeader parsed = parse(file_of(R"({"__metadata__":{"z":"1","a":"x\u00e9"}})"));
  ASSERT_EQ(parsed.metadata.size(), 2u);
  EXPECT_EQ(parsed.metadata[0], (std::pair<std::string, std::string>{"a", "x\xc3\xa9"}));
  EXPECT_EQ(parsed.metadata[1].first, "z");
  EXPECT_TRUE(parse(file_of(R"({"__metadata__":null})")).metadata.empty());
}

TEST(SafetensorsTest, HeaderPaddedWithWhitespaceAsTheReferenceAllows) {
  // The reference writer pads with spaces to 8 bytes; its parser (serde_json) takes any
  // JSON whitespace on either side of the object.
  const std::string header = " \n{" + entry("a", "U8", "[2]", 0, 2) + "}\t\r   ";
  EXPECT_EQ(parse(file_of(header, "xy")).tensors.size(), 1u);
}

TEST(SafetensorsTest, EveryDtypeWithItsSize) {
  for (DType dtype : all_dtypes()) {
    const int bits = dtype_bits(dtype);
    // 8 elements fill whole bytes for every dtype, sub-byte ones included.
    const std::uint64_t bytes = 8u * static_cast<std::uint64_t>(bits) / 8u;
    const std::string name(dtype_name(dtype));
    const SafetensorsHeader parsed = parse(file_of("{" + entry("t", name, "[2,4]", 0, bytes) + "}",
                                                   std::string(bytes, '\0')));
    EXPECT_EQ(parsed.tensors.at(0).dtype, dtype) << name;
    EXPECT_EQ(dtype_from_name(name), dtype);
  }
  EXPECT_EQ(all_dtypes().size(), 22u);
  EXPECT_EQ(dtype_bits(DType::F4), 4);
  EXPECT_EQ(dtype_bits(DType::BF16), 16);
}

TEST(SafetensorsTest, EscapedKeysAndNamesAreDecoded) {
  const std::string header =
      R"({"a\u00e9\ud83d\ude00\n":{"d\u0074ype":"U\u0038","shape":[2],"data_offsets":[0,2]}})";
  const SafetensorsHeader parsed = parse(file_of(header, "xy"));
  EXPECT_EQ(parsed.tensors.at(0).name, "a\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_EQ(parsed.tensors.at(0).dtype, DType::U8);
}

TEST(SafetensorsTest, FindOfAMissingNameIsNotFoundNamingTheFile) {
  try {
    parse(file_of("{}")).find("h.0.w");
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(error.what()).find("model.safetensors: no tensor 'h.0.w'"), std::string::npos)
        << error.what();
  }
}

// --- Broken files --------------------------------------------------------------------------

struct BrokenCase {
  std::string name;
  std::string bytes;
  std::string fragment;  // part of the message
  ErrorCode code = ErrorCode::DataCorruption;
};

std::string u8(const std::string& name, const std::string& shape, std::uint64_t begin, std::uint64_t end) {
  return entry(name, "U8", shape, begin, end);
}

std::vector<BrokenCase> broken_cases() {
  const std::string a2 = u8("a", "[2]", 0, 2);
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  return {
      {"EmptyFile", "", "holds 0 bytes, fewer than the 8"},
      {"UnderEightBytes", std::string(5, '\0'), "holds 5 bytes"},
      {"LengthLargerThanFile", file_with_length(100, "{}"), "runs to byte 108 but the file holds 10 bytes"},
      {"LengthOverTheCap", file_with_length(100'000'001, "{}"), "above the limit of 100000000"},
      {"LengthOfAllOnes", file_with_length(UINT64_MAX, "{}"), "above the limit"},
      {"ZeroLength", file_of(""), "expected a JSON object"},
      {"NotUtf8", file_of("{\"a\xff\":1}"), "not valid UTF-8 at byte 11"},
      {"OverlongUtf8", file_of("{\"a\xc0\xaf\":1}"), "not valid UTF-8"},
      {"EncodedSurrogate", file_of("{\"a\xed\xa0\x80\":1}"), "not valid UTF-8"},
      {"ByteOrderMark", file_of("\xef\xbb\xbf{}"), "expected a JSON object at byte 8"},
      {"NotJson", file_of("hello"), "expected a JSON object"},
      {"TopLevelArray", file_of("[]"), "the header is an array, expected a JSON object"},
      {"TrailingGarbage", file_of("{}x"), "trailing characters after the JSON value at byte 10"},
      {"TrailingNul", file_of(std::string("{}\0", 3)), "trailing characters"},
      {"SecondObject", file_of("{}{}"), "trailing characters"},
      {"TrailingComma", file_of("{" + a2 + ",}", "xy"), "expected a key after ','"},
      {"UnterminatedObject", file_of("{" + a2, "xy"), "expected ',' or '}'"},
      {"DuplicateTensor", file_of("{" + a2 + "," + a2 + "}", "xy"), "duplicate key 'a'"},
      {"DuplicateField", file_of(R"({"a":{"dtype":"U8","dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "xy"),
       "duplicate key 'dtype'"},
      {"DuplicateMetadataKey", file_of(R"({"__metadata__":{"k":"v","k":"w"}})"), "duplicate key 'k'"},
      {"UnknownDtype", file_of("{" + entry("a", "U7", "[2]", 0, 2) + "}", "xy"), "tensor 'a': unknown dtype 'U7'"},
      {"LowerCaseDtype", file_of("{" + entry("a", "u8", "[2]", 0, 2) + "}", "xy"), "unknown dtype 'u8'"},
      {"NegativeShape", file_of("{" + u8("a", "[-2]", 0, 2) + "}", "xy"), "tensor 'a': shape[0] is -2"},
      {"MinusZeroShape", file_of("{" + u8("a", "[-0]", 0, 0) + "}"), "shape[0] is -0"},
      {"FloatShape", file_of("{" + u8("a", "[1,2.0]", 0, 2) + "}", "xy"), "shape[1] is 2.0"},
      {"ExponentShape", file_of("{" + u8("a", "[2e0]", 0, 2) + "}", "xy"), "shape[0] is 2e0"},
      {"LeadingZeroShape", file_of("{" + u8("a", "[02]", 0, 2) + "}", "xy"), "expected ',' or ']'"},
      {"HugeShape", file_of("{" + u8("a", "[18446744073709551616]", 0, 2) + "}", "xy"), "below 2^64"},
      {"ShapeAboveInt64", file_of("{" + u8("a", "[0,9223372036854775808]", 0, 0) + "}"), "above 2^63 - 1"},
      {"StringShape", file_of("{" + u8("a", "[\"2\"]", 0, 2) + "}", "xy"), "shape[0] is a string"},
      {"NullShape", file_of(R"({"a":{"dtype":"U8","shape":null,"data_offsets":[0,2]}})", "xy"),
       "expected an array, found null"},
      {"ShapeProductOverflow", file_of("{" + u8("a", "[4294967296,4294967296,0]", 0, 0) + "}"),
       "element count of its shape overflows"},
      {"ShapeBytesOverflow", file_of("{" + entry("a", "U64", "[4611686018427387904]", 0, 2) + "}", "xy"),
       "size in bits overflows"},
      {"BeginAfterEnd", file_of("{" + u8("a", "[2]", 2, 0) + "}", "xy"), "data_offsets [2, 0] end before they begin"},
      {"SizeMismatch", file_of("{" + entry("a", "F32", "[2]", 0, 4) + "}", "abcd"),
       "tensor 'a' (its entry at byte 13): data_offsets [0, 4] span 4 bytes but its shape of F32 needs 8"},
      {"SubByteNotWholeBytes", file_of("{" + entry("a", "F4", "[3]", 0, 2) + "}", "xy"),
       "3 elements of F4 do not fill whole bytes"},
      {"ScalarOfF4", file_of("{" + entry("a", "F4", "[]", 0, 0) + "}"), "1 elements of F4"},
      {"Gap", file_of("{" + a2 + "," + u8("b", "[2]", 3, 5) + "}", "abcde"),
       "tensor 'b': data begins at byte 3 of the data section but the tensors before it end at byte 2 (a gap)"},
      {"Overlap", file_of("{" + a2 + "," + u8("b", "[2]", 1, 3) + "}", "abc"), "(an overlap)"},
      {"NotStartingAtZero", file_of("{" + u8("a", "[2]", 1, 3) + "}", "abc"),
       "tensor 'a': data begins at byte 1 of the data section but the tensors before it end at byte 0"},
      {"DataShorterThanFile", file_of("{" + a2 + "}", "xyz"),
       "tensor 'a': data ends at byte 2 but the data section holds 3 bytes"},
      {"DataLongerThanFile", file_of("{" + a2 + "}", "x"), "data ends at byte 2 but the data section holds 1 bytes"},
      {"NoTensorsButData", file_of("{}", "x"), "lists no tensors, so data ends at byte 0 but the data section holds 1"},
      {"MetadataNumber", file_of(R"({"__metadata__":{"k":1}})"), "__metadata__ value of 'k' is a number"},
      {"MetadataNested", file_of(R"({"__metadata__":{"k":{"a":"b"}}})"), "value of 'k' is an object"},
      {"MetadataString", file_of(R"({"__metadata__":"x"})"), "__metadata__ is a string"},
      {"DuplicateMetadata", file_of(R"({"__metadata__":{},"__metadata__":{}})"), "duplicate key '__metadata__'"},
      {"UnknownKeyInEntry",
       file_of(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":1}})", "xy"), "tensor 'a': unknown key 'x'"},
      {"MissingOffsets", file_of(R"({"a":{"dtype":"U8","shape":[2]}})"), "tensor 'a' has no data_offsets"},
      {"EntryAsArray", file_of(R"({"a":["U8",[2],[0,2]]})", "xy"), "tensor 'a' is an array, expected an object"},
      {"EntryAsBool", file_of(R"({"a":true})"), "tensor 'a' is a boolean"},
      {"ThreeOffsets", file_of(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2,4]}})", "xy"),
       "more than 2 elements"},
      {"OneOffset", file_of(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", "xy"), "has 1 elements"},
      {"DeepNestingInMetadata", file_of("{\"__metadata__\":" + deep + "}"), "__metadata__ is an array"},
      {"DeepNestingInEntry", file_of("{\"a\":{\"dtype\":\"U8\",\"shape\":" + deep + "}}"), "shape[0] is an array"},
      {"RawControlCharacter", file_of("{\"a\x01\":1}"), "raw control character in a string at byte 11"},
      {"LoneSurrogate", file_of(R"({"a\ud83d":1})"), "lone high surrogate"},
      {"LoneLowSurrogate", file_of(R"({"a\ude00":1})"), "lone low surrogate"},
      {"BadEscape", file_of(R"({"a\q":1})"), "invalid escape"},
      {"Comment", file_of("{/*x*/}"), "expected a key or '}'"},
      {"ControlCharacterInNameIsEscaped", file_of("{" + entry("a\\u0001", "U7", "[]", 0, 1) + "}", "x"),
       "tensor 'a\\x01': unknown dtype"},
  };
}

class SafetensorsBrokenTest : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(SafetensorsBrokenTest, IsRejectedWithTheCodeAndAMessageNamingTheFile) {
  const BrokenCase& broken = GetParam();
  try {
    parse(broken.bytes);
    FAIL() << "no error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.code(), broken.code) << message;
    EXPECT_EQ(message.rfind("model.safetensors: ", 0), 0u) << message;
    EXPECT_NE(message.find(broken.fragment), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Catalogue, SafetensorsBrokenTest, ::testing::ValuesIn(broken_cases()),
                         [](const ::testing::TestParamInfo<BrokenCase>& info) { return info.param.name; });

TEST(SafetensorsTest, PrefixShorterThanTheHeaderIsAnInvalidArgument) {
  const std::string bytes = file_of("{}    ");
  try {
    parse_safetensors_header("f", std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), 9), bytes.size());
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find("given 9 bytes but the header needs 14"), std::string::npos);
  }
}

// --- The JSON reader on its own -------------------------------------------------------------

void skip_all(const std::string& text) {
  JsonReader json(text, "j", 0);
  json.skip_value();
  json.finish();
}

TEST(SafetensorsJsonTest, AcceptsTheFullGrammar) {
  skip_all(R"( {"a": [1, -2.5e+3, 0.0, true, false, null, "x\"\\\/\b\f\n\r\t\u0041"], "b": {}, "c": []} )");
  skip_all(std::string(JsonReader::kMaxDepth, '[') + std::string(JsonReader::kMaxDepth, ']'));
}

TEST(SafetensorsJsonTest, RefusesNestingPastTheLimit) {
  const std::string deep = std::string(JsonReader::kMaxDepth + 1, '[') + std::string(JsonReader::kMaxDepth + 1, ']');
  try {
    skip_all(deep);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::DataCorruption);
    EXPECT_NE(std::string(error.what()).find("nested deeper than 64 levels at byte 64"), std::string::npos)
        << error.what();
  }
}

TEST(SafetensorsJsonTest, RefusesMalformedText) {
  for (const std::string text : {"", "[1,]", "[1 2]", "{\"a\" 1}", "01", "1.", "1e", "-", "tru", "\"abc", "[\"\\u12\"]",
                                 "{\"a\":1,\"a\":2}", "\"\\ud800\\u0041\"", "nul", "[", "{\"a\":1"}) {
    EXPECT_THROW(skip_all(text), Error) << text;
  }
}

TEST(SafetensorsJsonTest, NumbersKeepTheirTextAndUnsignedValue) {
  JsonReader json("[18446744073709551615, 18446744073709551616, -1, 7]", "j", 0);
  json.begin_array();
  std::vector<JsonNumber> numbers;
  while (json.next_element()) numbers.push_back(json.read_number());
  ASSERT_EQ(numbers.size(), 4u);
  EXPECT_EQ(numbers[0].unsigned_value, UINT64_MAX);
  EXPECT_FALSE(numbers[1].unsigned_value);
  EXPECT_EQ(numbers[1].text, "18446744073709551616");
  EXPECT_FALSE(numbers[2].unsigned_value);
  EXPECT_EQ(numbers[3].unsigned_value, 7u);
}

TEST(SafetensorsJsonTest, Utf8Validation) {
  EXPECT_EQ(utf8_error_offset("plain \xc3\xa9 \xf0\x9f\x98\x80"), std::string_view::npos);
  EXPECT_EQ(utf8_error_offset("ab\x80"), 2u);
  EXPECT_EQ(utf8_error_offset("a\xf4\x90\x80\x80"), 1u);  // past U+10FFFF
  EXPECT_EQ(utf8_error_offset("a\xe2\x82"), 1u);          // truncated
}

// --- Reading from files --------------------------------------------------------------------

TEST(SafetensorsFileTest, ReadsTheHeaderOfAFile) {
  TempDir dir;
  const std::string path = dir.write("m.safetensors", file_of("{" + entry("w", "BF16", "[2]", 0, 4) + "}", "abcd"));
  const SafetensorsHeader header = read_safetensors_header(path);
  EXPECT_EQ(header.file_label, path);
  EXPECT_EQ(header.find("w").end, 4u);
}

TEST(SafetensorsFileTest, MissingFileIsNotFoundNamingIt) {
  TempDir dir;
  try {
    read_safetensors_header(dir.path("missing.safetensors"));
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(error.what()).find("missing.safetensors"), std::string::npos);
  }
}

TEST(SafetensorsFileTest, DirectoryIsAnIoError) {
  TempDir dir;
  try {
    read_safetensors_header(dir.path(""));
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::IO) << error.what();
  }
}

TEST(SafetensorsFileTest, BrokenFilesNameThePath) {
  TempDir dir;
  const std::string empty = dir.write("empty.safetensors", "");
  const std::string big = dir.write("big.safetensors", file_with_length(1u << 30, "{}"));
  const std::string tail = dir.write("tail.safetensors", file_of("{}", "x"));
  for (const std::string& path : {empty, big, tail}) {
    try {
      read_safetensors_header(path);
      FAIL() << "no error for " << path;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::DataCorruption);
      EXPECT_EQ(std::string(error.what()).rfind(path + ": ", 0), 0u) << error.what();
    }
  }
}

}  // namespace
}  // namespace tt

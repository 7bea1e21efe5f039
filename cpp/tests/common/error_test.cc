// Tests of tt::Error and the stable names of its codes.
#include "tt/common/error.h"

#include <gtest/gtest.h>

namespace tt {
namespace {

TEST(ErrorTest, CarriesCodeAndMessageUnchanged) {
  const Error error(ErrorCode::NotFound, "region 3: no kernel named \"relu\"");
  EXPECT_EQ(error.code(), ErrorCode::NotFound);
  EXPECT_STREQ(error.what(), "region 3: no kernel named \"relu\"");
}

TEST(ErrorTest, CodeNamesAreStable) {
  EXPECT_EQ(error_code_name(ErrorCode::InvalidArgument), "InvalidArgument");
  EXPECT_EQ(error_code_name(ErrorCode::NotFound), "NotFound");
  EXPECT_EQ(error_code_name(ErrorCode::ResourceExhausted), "ResourceExhausted");
  EXPECT_EQ(error_code_name(ErrorCode::Incompatible), "Incompatible");
  EXPECT_EQ(error_code_name(ErrorCode::DataCorruption), "DataCorruption");
  EXPECT_EQ(error_code_name(ErrorCode::IO), "IO");
  EXPECT_EQ(error_code_name(ErrorCode::Cancelled), "Cancelled");
  EXPECT_EQ(error_code_name(ErrorCode::Stalled), "Stalled");
  EXPECT_EQ(error_code_name(ErrorCode::Internal), "Internal");
}

}  // namespace
}  // namespace tt

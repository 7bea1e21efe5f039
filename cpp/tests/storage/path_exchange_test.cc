// Tests of the atomic path exchange used to publish artifacts.
#include "tt/storage/path_exchange.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>

#include "tt/common/error.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class PathExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tt_exchange_" + std::to_string(::getpid()));
    fs::create_directories(root_ / "a");
    fs::create_directories(root_ / "b");
    std::ofstream(root_ / "a" / "file") << "old";
    std::ofstream(root_ / "b" / "file") << "new";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(PathExchangeTest, SwapsTwoDirectories) {
  exchange_paths((root_ / "a").string(), (root_ / "b").string());
  EXPECT_EQ(read_file(root_ / "a" / "file"), "new");
  EXPECT_EQ(read_file(root_ / "b" / "file"), "old");
}

TEST_F(PathExchangeTest, MissingPathIsAnIoErrorNamingIt) {
  try {
    exchange_paths((root_ / "a").string(), (root_ / "missing").string());
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::IO);
    EXPECT_NE(std::string(error.what()).find("missing"), std::string::npos);
  }
  EXPECT_EQ(read_file(root_ / "a" / "file"), "old");
}

}  // namespace
}  // namespace tt

// Tests of SHA-256: the FIPS 180-2 vectors, chunked updates and the hex helpers.
#include "tt/common/sha256.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tt/common/error.h"

namespace tt {
namespace {

constexpr Sha256Impl kImpls[] = {Sha256Impl::Fastest, Sha256Impl::Portable};

std::string hex_of(const std::string& message, Sha256Impl impl) {
  Sha256 hasher(impl);
  hasher.update(message.data(), message.size());
  return digest_to_hex(hasher.finish());
}

TEST(Sha256Test, Fips180Vectors) {
  const std::string million(1000000, 'a');
  for (Sha256Impl impl : kImpls) {
    EXPECT_EQ(hex_of("", impl), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hex_of("abc", impl), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(hex_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", impl),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(hex_of(million, impl), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
  EXPECT_EQ(digest_to_hex(sha256("abc", 3)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, ChunkedUpdatesOfRandomSizesMatchOneShot) {
  std::mt19937_64 random(7);
  std::vector<std::uint8_t> message(300000);
  for (auto& byte : message) byte = static_cast<std::uint8_t>(random());
  for (Sha256Impl impl : kImpls) {
    for (std::size_t length : {std::size_t{0}, std::size_t{55}, std::size_t{56}, std::size_t{63}, std::size_t{64},
                               std::size_t{65}, std::size_t{119}, std::size_t{120}, message.size()}) {
      const Sha256Digest expected = sha256(message.data(), length);
      Sha256 hasher(impl);
      for (std::size_t done = 0; done < length;) {
        const std::size_t step = std::min<std::size_t>(random() % 200, length - done);
        hasher.update(message.data() + done, step);
        done += step;
      }
      EXPECT_EQ(hasher.finish(), expected) << "length " << length;
    }
  }
}

TEST(Sha256Test, FinishResetsForTheNextMessage) {
  Sha256 hasher;
  hasher.update("xyz", 3);
  hasher.finish();
  hasher.update("abc", 3);
  EXPECT_EQ(hasher.finish(), sha256("abc", 3));
}

TEST(Sha256Test, HexRoundTripsAndRejectsMalformedText) {
  const Sha256Digest digest = sha256("abc", 3);
  EXPECT_EQ(hex_to_digest(digest_to_hex(digest)), digest);
  EXPECT_EQ(hex_to_digest("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"), digest);
  for (const std::string& bad : {std::string(""), std::string(63, 'a'), std::string(65, 'a'), std::string(64, 'g')}) {
    try {
      hex_to_digest(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    }
  }
}

TEST(Sha256Test, HashesAtSeveralHundredMegabytesPerSecond) {
#ifndef NDEBUG
  GTEST_SKIP() << "a speed check means nothing in an unoptimised build";
#else
  std::vector<std::uint8_t> data(64 << 20, 0x5a);
  const auto start = std::chrono::steady_clock::now();
  sha256(data.data(), data.size());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double mb_per_s = static_cast<double>(data.size()) / 1e6 / seconds;
  RecordProperty("MBps", static_cast<int>(mb_per_s));
  std::printf("sha256: %.0f MB/s (cpu extensions: %s)\n", mb_per_s, sha256_uses_cpu_extensions() ? "yes" : "no");
  // Loose: the machine is shared. The real rate is several times this.
  EXPECT_GT(mb_per_s, 100.0);
#endif
}

}  // namespace
}  // namespace tt

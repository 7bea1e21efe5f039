// Tests of the memory ledger: budgets kept, failed reservations hold nothing, peaks, waiting for room.
#include "tt/memory/ledger.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tt/common/error.h"

namespace tt {
namespace {

MemoryLedger two_tiers() { return MemoryLedger({{"ram", TierKind::Host, 1000}, {"dev", TierKind::Device, 100}}); }

TEST(MemoryLedgerTest, OverBudgetNamesTheTierAndHoldsNothing) {
  MemoryLedger ledger = two_tiers();
  ledger.reserve(0, 600, "weights");
  try {
    ledger.reserve(0, 500, "layer 3 output");
    FAIL() << "over budget was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::ResourceExhausted);
    EXPECT_STREQ(error.what(), "tier 'ram': layer 3 output needs 500 bytes but 600 of its 1000 allowed bytes are held");
  }
  EXPECT_EQ(ledger.held(0), 600);
  EXPECT_EQ(ledger.peak(0), 600);
}

TEST(MemoryLedgerTest, ReserveAllTakesEveryTierOrNone) {
  MemoryLedger ledger = two_tiers();
  EXPECT_THROW(ledger.reserve_all({10, 101}, 0.0, "call"), Error);  // dev could never hold 101
  EXPECT_EQ(ledger.held(0), 0);
  ledger.reserve(1, 50, "resident");
  EXPECT_FALSE(ledger.reserve_all({10, 60}, 0.01, "call"));  // room only once the resident goes
  EXPECT_EQ(ledger.held(0), 0);
  EXPECT_EQ(ledger.held(1), 50);
  EXPECT_TRUE(ledger.reserve_all({10, 50}, 0.0, "call"));
  EXPECT_EQ(ledger.peak(1), 100);
  ledger.release_all({10, 50});
  ledger.reset_peaks();
  EXPECT_EQ(ledger.peak(1), 50);
}

TEST(MemoryLedgerTest, AWaitingCallStartsWhenRoomIsGivenBack) {
  MemoryLedger ledger = two_tiers();
  ASSERT_TRUE(ledger.reserve_all({800, 0}, 0.0, "first call"));
  std::atomic<bool> second_started = false;
  std::thread second([&] {
    EXPECT_TRUE(ledger.reserve_all({800, 0}, 30.0, "second call"));
    second_started = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(second_started);
  ledger.release_all({800, 0});
  second.join();
  EXPECT_TRUE(second_started);
  EXPECT_EQ(ledger.held(0), 800);
  EXPECT_EQ(ledger.peak(0), 800);  // never both at once
}

TEST(MemoryLedgerTest, RejectsBadArguments) {
  MemoryLedger ledger = two_tiers();
  EXPECT_THROW(ledger.reserve(2, 1, "x"), Error);
  EXPECT_THROW(ledger.reserve(0, -1, "x"), Error);
  EXPECT_THROW(ledger.release(0, 1), Error);  // nothing held
  EXPECT_THROW(ledger.reserve_all({1}, 0.0, "x"), Error);
}

}  // namespace
}  // namespace tt

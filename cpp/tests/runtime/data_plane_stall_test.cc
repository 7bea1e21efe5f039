// After a stall, a call's working set stays booked in the ledger until its stuck
// instruction ends: no later call is admitted into memory that instruction may still write.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "../ir/program_builder.h"
#include "tt/common/error.h"
#include "tt/runtime/data_plane.h"

namespace tt {
namespace {

using test::ProgramBuilder;

TEST(DataPlaneStallTest, AStalledCallKeepsItsBookingUntilItsStuckInstructionEnds) {
  ProgramBuilder b;
  const auto x = b.buffer(4096), y = b.buffer(4096);
  // Two independent computes: the caller runs one, a pool worker the other, which sticks.
  b.compute({}, {x});
  b.compute({}, {y});
  b.spec.outputs = {x, y};
  DataPlane plane(std::make_shared<const Program>(b.spec), nullptr, 1);
  std::mutex mutex;
  std::condition_variable changed;
  bool stuck = false, release = false;
  auto memory = plane.begin_call(1.0);
  const std::int64_t booked = plane.ledger().held(0);
  ASSERT_EQ(booked, 2 * 4096);
  RunOptions options;
  options.stall_timeout_s = 0.1;
  // The caller takes the first root and waits until the worker is stuck in the second, so
  // the stuck one is never the caller's (a kernel on the caller cannot be abandoned).
  const ComputeKernel compute = [&](const Instruction& instruction) {
    std::unique_lock lock(mutex);
    if (instruction.id == 0) {
      changed.wait(lock, [&] { return stuck; });
      return;
    }
    stuck = true;
    changed.notify_all();
    changed.wait(lock, [&] { return release; });
  };
  try {
    plane.run(memory, compute, options);
    FAIL() << "expected a stall";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Stalled);
  }
  plane.end_call(memory);
  EXPECT_EQ(plane.ledger().held(0), booked) << "the stuck compute may still write the call's memory";
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(stuck);
    release = true;
    changed.notify_all();
  }
  // The worker ends the instruction and gives the booking back.
  for (int wait = 0; wait < 200 && plane.ledger().held(0) != 0; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(plane.ledger().held(0), 0);
}

}  // namespace
}  // namespace tt

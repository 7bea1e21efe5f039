// Tests of the data plane: loads land in arena buffers, frees end lives, measured peaks equal the
// simulator's, I/O errors leave nothing held, and the ledger admits calls only with room.
#include "tt/runtime/data_plane.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "../ir/program_builder.h"
#include "../storage/io_test_support.h"
#include "tt/common/error.h"
#include "tt/sim/program_sim.h"

namespace tt {
namespace {

using test::ProgramBuilder;

// Three layers whose 4 KiB weights stream from `path` with prefetch 1: load k+1 is listed
// before compute k, so it overlaps it; the memory plan keeps at most two loaded at once.
struct StreamedChain {
  ProgramBuilder builder;
  std::vector<std::int64_t> weights;  // host buffers the loads write

  StreamedChain(const std::string& path, std::int64_t ram_bytes = 1 << 20) : builder(ram_bytes) {
    builder.spec.files = {{path, 3 * 4096, 0, {}}};
    std::vector<std::int64_t> ranges, loads;
    for (int k = 0; k < 3; ++k) {
      ranges.push_back(builder.buffer(4096, 2, BufferLifetime::Resident, 0, 4096 * k));
      weights.push_back(builder.buffer(4096));
    }
    std::int64_t previous = -1, previous_free = -1;
    loads.push_back(builder.add(InstructionKind::Load, 1, {ranges[0]}, {weights[0]}));
    for (int k = 0; k < 3; ++k) {
      if (k + 1 < 3) {
        std::vector<std::int64_t> deps;
        if (previous_free >= 0) deps.push_back(previous_free);
        loads.push_back(builder.add(InstructionKind::Load, 1, {ranges[k + 1]}, {weights[k + 1]}, deps));
      }
      std::vector<std::int64_t> deps = {loads[k]};
      if (previous >= 0) deps.push_back(previous);
      previous = builder.compute({weights[k]}, {}, deps);
      previous_free = builder.free({weights[k]}, {previous});
    }
  }
};

TEST(DataPlaneTest, LoadsLandInArenaBuffersAndPeaksEqualTheSimulators) {
  test::TempDir dir;
  const std::string path = dir.path("weights.bin");
  const auto bytes = test::random_bytes(3 * 4096, 1);
  test::write_file(path, bytes);
  StreamedChain chain(path);
  auto program = std::make_shared<const Program>(chain.builder.spec);
  DataPlane plane(program, std::make_shared<IoEngine>(IoEngineOptions{}), 2);
  auto memory = plane.begin_call(1.0);
  std::vector<int> matched;
  const RunReport report = plane.run(memory, [&](const Instruction& instruction) {
    const int k = static_cast<int>(matched.size());
    const std::byte* seen = memory->address(program->buffer_position(chain.weights[k]));
    matched.push_back(std::memcmp(seen, bytes.data() + 4096 * k, 4096) == 0);
    (void)instruction;
  }, {});
  EXPECT_EQ(matched, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(report.records.size(), program->schedule()->size());
  ProgramCosts costs;
  costs.seconds.assign(program->schedule()->size(), 0.001);
  const ProgramSimResult simulated = simulate_program(*program, costs);
  EXPECT_EQ(memory->peak_bytes(), simulated.peak_bytes);
  EXPECT_EQ(memory->peak_bytes()[0], 2 * 4096);  // prefetch 1: two layers' weights at once
  plane.end_call(memory);
  EXPECT_EQ(plane.ledger().held(0), 0);
}

// Loads read the file the plane opened (open_files, else its first load), held from then
// on: deleting the path, or saving another file under its name, changes nothing a call reads.
TEST(DataPlaneTest, LoadsKeepReadingTheFileTheyOpenedAfterItsPathIsDeletedOrReplaced) {
  test::TempDir dir;
  const std::string path = dir.path("weights.bin");
  const auto bytes = test::random_bytes(3 * 4096, 3);
  test::write_file(path, bytes);
  StreamedChain chain(path);
  auto program = std::make_shared<const Program>(chain.builder.spec);
  DataPlane plane(program, std::make_shared<IoEngine>(IoEngineOptions{}), 2);
  const auto call_reads_the_original = [&] {
    auto memory = plane.begin_call(1.0);
    int matched = 0;
    plane.run(memory, [&](const Instruction&) {
      const std::byte* seen = memory->address(program->buffer_position(chain.weights[matched]));
      matched += std::memcmp(seen, bytes.data() + 4096 * matched, 4096) == 0;
    }, {});
    plane.end_call(memory);
    return matched == 3;
  };
  plane.open_files();
  ASSERT_EQ(std::remove(path.c_str()), 0);
  EXPECT_TRUE(call_reads_the_original());
  test::write_file(path, test::random_bytes(3 * 4096, 4));  // another file under the name
  EXPECT_TRUE(call_reads_the_original());
}

TEST(DataPlaneTest, AnIoErrorFailsTheCallAndTheNextCallSucceeds) {
  test::TempDir dir;
  const std::string path = dir.path("weights.bin");
  test::write_file(path, test::random_bytes(3 * 4096, 2));
  StreamedChain chain(path);
  auto program = std::make_shared<const Program>(chain.builder.spec);
  auto faulty = std::make_shared<FaultInjectingIoBackend>(std::make_shared<PosixIoBackend>(),
                                                          FaultPlan{IoFault::Eio, 2, false, 0.0});
  DataPlane plane(program, std::make_shared<IoEngine>(IoEngineOptions{}, faulty), 2);
  std::atomic<int> computed = 0;
  auto memory = plane.begin_call(1.0);
  try {
    plane.run(memory, [&](const Instruction&) { ++computed; }, {});
    FAIL() << "the EIO did not fail the call";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::IO);
    EXPECT_NE(std::string(error.what()).find("weights.bin"), std::string::npos) << error.what();
  }
  EXPECT_EQ(memory->peak_bytes().size(), 3u);
  plane.end_call(memory);
  EXPECT_EQ(plane.ledger().held(0), 0);  // nothing held after the failure
  computed = 0;
  auto again = plane.begin_call(1.0);
  plane.run(again, [&](const Instruction&) { ++computed; }, {});
  plane.end_call(again);
  EXPECT_EQ(computed.load(), 3);
}

TEST(DataPlaneTest, TheLedgerAdmitsACallOnlyWithRoomForItsWorkingSet) {
  test::TempDir dir;
  const std::string path = dir.path("weights.bin");
  test::write_file(path, test::random_bytes(3 * 4096, 3));
  StreamedChain chain(path, /*ram_bytes=*/3 * 4096);  // room for one call's two weights, not two calls'
  auto program = std::make_shared<const Program>(chain.builder.spec);
  DataPlane plane(program, std::make_shared<IoEngine>(IoEngineOptions{}), 2);
  auto first = plane.begin_call(1.0);
  EXPECT_THROW(plane.begin_call(0.05), Error);  // waits, then gives up: never over budget
  EXPECT_EQ(plane.ledger().held(0), 2 * 4096);
  std::atomic<bool> second_admitted = false;
  std::thread second([&] {
    auto memory = plane.begin_call(30.0);
    second_admitted = true;
    plane.end_call(memory);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(second_admitted);
  plane.end_call(first);
  second.join();
  EXPECT_TRUE(second_admitted);
  EXPECT_EQ(plane.ledger().peak(0), 2 * 4096);
}

}  // namespace
}  // namespace tt

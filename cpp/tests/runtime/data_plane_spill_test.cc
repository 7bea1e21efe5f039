// Tests of spills and reloads in the data plane: bytes come back from the spill file, the
// Disk tier is booked and counted, write faults fail the run and the next one succeeds,
// concurrent calls keep their own files, and nothing is left in the spill directory.
#include "tt/runtime/data_plane.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "../ir/program_builder.h"
#include "../storage/io_test_support.h"
#include "tt/common/error.h"
#include "tt/sim/program_sim.h"

namespace tt {
namespace {

using test::ProgramBuilder;

constexpr std::int32_t kDisk = 2;  // ProgramBuilder's disk tier

// A compute fills host buffers a (8 KiB) and b (4 KiB); each is spilled; a second compute
// scribbles over both, so that only the spill file still holds their bytes; they are freed,
// reloaded into a2 and b2 (which may reuse their bytes), and a last compute checks those.
struct SpillRoundTrip {
  ProgramBuilder builder;
  std::int64_t a, b, da, db, a2, b2;
  std::int64_t fill, spill_a, scribble, reload_a, check;

  explicit SpillRoundTrip(std::int64_t disk_bytes = 1 << 20) {
    builder.spec.tiers[kDisk].capacity_bytes = disk_bytes;
    a = builder.buffer(8192);
    b = builder.buffer(4096);
    da = builder.buffer(8192, kDisk);
    db = builder.buffer(4096, kDisk);
    a2 = builder.buffer(8192);
    b2 = builder.buffer(4096);
    fill = builder.compute({}, {a, b});
    spill_a = builder.add(InstructionKind::Spill, 1, {a}, {da}, {fill});
    const auto spill_b = builder.add(InstructionKind::Spill, 1, {b}, {db}, {fill});
    scribble = builder.compute({a, b}, {}, {spill_a, spill_b});
    const auto freed = builder.free({a, b}, {scribble});
    reload_a = builder.add(InstructionKind::Reload, 1, {da}, {a2}, {freed});
    const auto reload_b = builder.add(InstructionKind::Reload, 1, {db}, {b2}, {freed});
    builder.free({da, db}, {reload_a, reload_b});
    check = builder.compute({a2, b2}, {}, {reload_a, reload_b});
    builder.free({a2, b2}, {check});
  }

  // The kernel of one call: fills a and b with bytes from `seed`, scribbles over them (after
  // calling `while_spilled`), and sets `matched` when a2 and b2 hold the filled bytes.
  ComputeKernel kernel(const Program& program, const std::shared_ptr<CallMemory>& memory, std::uint64_t seed,
                       bool& matched, std::function<void()> while_spilled = {}) const {
    return [this, &program, memory, seed, &matched, while_spilled](const Instruction& instruction) {
      const auto bytes = test::random_bytes(8192 + 4096, seed);
      auto at = [&](std::int64_t id) { return memory->address(program.buffer_position(id)); };
      if (instruction.id == fill) {
        std::memcpy(at(a), bytes.data(), 8192);
        std::memcpy(at(b), bytes.data() + 8192, 4096);
      } else if (instruction.id == scribble) {
        if (while_spilled) while_spilled();
        std::memset(at(a), 0xEE, 8192);
        std::memset(at(b), 0xEE, 4096);
      } else if (instruction.id == check) {
        matched = std::memcmp(at(a2), bytes.data(), 8192) == 0 && std::memcmp(at(b2), bytes.data() + 8192, 4096) == 0;
      }
    };
  }
};

// Runs one call of `trip` on `plane` with bytes from `seed`; returns whether they came back.
bool round_trip(DataPlane& plane, const SpillRoundTrip& trip, std::uint64_t seed) {
  auto memory = plane.begin_call(30.0);
  bool matched = false;
  plane.run(memory, trip.kernel(plane.program(), memory, seed, matched), {});
  plane.end_call(memory);
  return matched;
}

TEST(DataPlaneSpillTest, BytesComeBackFromTheSpillFileAndTheDiskTierIsCounted) {
  test::TempDir dir;
  SpillRoundTrip trip;
  auto program = std::make_shared<const Program>(trip.builder.spec);
  EXPECT_EQ(program->memory_plan().arena_bytes[kDisk], 8192 + 4096);
  DataPlane plane(program, std::make_shared<IoEngine>(IoEngineOptions{}), 2, dir.root());
  auto memory = plane.begin_call(1.0);
  EXPECT_EQ(plane.ledger().held(kDisk), 8192 + 4096);  // booked for the call's spill file
  bool matched = false;
  const RunReport report = plane.run(memory, trip.kernel(*program, memory, 1, matched), {});
  EXPECT_TRUE(matched);
  EXPECT_EQ(report.records[static_cast<std::size_t>(trip.spill_a)].bytes, 8192);
  EXPECT_EQ(report.records[static_cast<std::size_t>(trip.reload_a)].bytes, 8192);
  ProgramCosts costs;
  costs.seconds.assign(program->schedule()->size(), 0.001);
  EXPECT_EQ(memory->peak_bytes(), simulate_program(*program, costs).peak_bytes);
  EXPECT_EQ(memory->peak_bytes()[kDisk], 8192 + 4096);
  try {
    memory->address(program->buffer_position(trip.da));
    ADD_FAILURE() << "a spilled buffer has an address";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find("lives in the spill file"), std::string::npos) << error.what();
  }
  plane.end_call(memory);
  EXPECT_EQ(plane.ledger().held(kDisk), 0);
  EXPECT_EQ(plane.ledger().peak(kDisk), 8192 + 4096);
  EXPECT_TRUE(round_trip(plane, trip, 2));  // the next call reuses the file
}

TEST(DataPlaneSpillTest, TheDiskTiersCapacityBoundsConcurrentCalls) {
  test::TempDir dir;
  SpillRoundTrip trip(/*disk_bytes=*/8192 + 4096);  // one call's spill file, not two
  DataPlane plane(std::make_shared<const Program>(trip.builder.spec), std::make_shared<IoEngine>(IoEngineOptions{}), 2,
                  dir.root());
  auto first = plane.begin_call(1.0);
  EXPECT_THROW(plane.begin_call(0.05), Error);
  plane.end_call(first);
  EXPECT_TRUE(round_trip(plane, trip, 3));
  SpillRoundTrip too_small(/*disk_bytes=*/8192);
  EXPECT_THROW(Program(too_small.builder.spec), Error);  // the plan itself does not fit
}

struct WriteFault {
  IoFault fault;
  int error;
};

class DataPlaneSpillFaultTest : public ::testing::TestWithParam<WriteFault> {};

TEST_P(DataPlaneSpillFaultTest, TheNthWriteFailsTheRunNamingTheSpillFileAndTheNextRunSucceeds) {
  test::TempDir dir;
  SpillRoundTrip trip;
  auto program = std::make_shared<const Program>(trip.builder.spec);
  auto faulty = std::make_shared<FaultInjectingIoBackend>(
      std::make_shared<PosixIoBackend>(), FaultPlan{.fault = GetParam().fault, .at_call = 2, .reads = false});
  DataPlane plane(program, std::make_shared<IoEngine>(IoEngineOptions{}, faulty), 2, dir.root());
  auto memory = plane.begin_call(1.0);
  bool matched = false;
  try {
    plane.run(memory, trip.kernel(*program, memory, 4, matched), {});
    ADD_FAILURE() << "the write fault did not fail the run";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.code(), ErrorCode::IO) << message;
    EXPECT_NE(message.find("write the spill file in '" + dir.root() + "' at offset "), std::string::npos) << message;
    EXPECT_NE(message.find(", length "), std::string::npos) << message;
    EXPECT_NE(message.find(std::strerror(GetParam().error)), std::string::npos) << message;
  }
  EXPECT_FALSE(matched);
  plane.end_call(memory);
  for (std::int32_t tier = 0; tier < 3; ++tier) EXPECT_EQ(plane.ledger().held(tier), 0) << "tier " << tier;
  EXPECT_TRUE(round_trip(plane, trip, 5));
  EXPECT_EQ(faulty->pwrite_calls(), 4);
}

INSTANTIATE_TEST_SUITE_P(Faults, DataPlaneSpillFaultTest,
                         ::testing::Values(WriteFault{IoFault::Enospc, ENOSPC}, WriteFault{IoFault::Eio, EIO}));

TEST(DataPlaneSpillTest, ShortWritesAreRetried) {
  test::TempDir dir;
  SpillRoundTrip trip;
  auto faulty = std::make_shared<FaultInjectingIoBackend>(
      std::make_shared<PosixIoBackend>(), FaultPlan{.fault = IoFault::Short, .repeat = true, .reads = false});
  DataPlane plane(std::make_shared<const Program>(trip.builder.spec),
                  std::make_shared<IoEngine>(IoEngineOptions{}, faulty), 2, dir.root());
  EXPECT_TRUE(round_trip(plane, trip, 6));
  EXPECT_GT(faulty->pwrite_calls(), 2 * 10);  // halving 8 KiB and 4 KiB down to one byte
}

TEST(DataPlaneSpillTest, NothingIsLeftInTheSpillDirectory) {
  test::TempDir dir;
  const bool anonymous = test::supports_o_tmpfile(dir.root());
  std::optional<test::CreationWatch> watch;
  if (anonymous) watch.emplace(dir.root());
  SpillRoundTrip trip;
  bool empty_while_spilled = false;
  {
    auto program = std::make_shared<const Program>(trip.builder.spec);
    DataPlane plane(program, std::make_shared<IoEngine>(IoEngineOptions{}), 2, dir.root());
    auto memory = plane.begin_call(1.0);
    bool matched = false;
    plane.run(memory, trip.kernel(*program, memory, 7, matched, [&] {
      empty_while_spilled = std::filesystem::is_empty(dir.root());
    }), {});
    EXPECT_TRUE(matched);
    plane.end_call(memory);
  }
  EXPECT_TRUE(empty_while_spilled);
  EXPECT_TRUE(std::filesystem::is_empty(dir.root()));
  if (anonymous) {
    EXPECT_TRUE(watch->created().empty());  // with O_TMPFILE no name ever appeared
  }
}

TEST(DataPlaneSpillTest, ConcurrentCallsEachGetTheirOwnBytesBack) {
  test::TempDir dir;
  SpillRoundTrip trip;
  DataPlane plane(std::make_shared<const Program>(trip.builder.spec), std::make_shared<IoEngine>(IoEngineOptions{}), 2,
                  dir.root());
  std::atomic<int> matched{0};
  std::vector<std::thread> callers;
  for (std::uint64_t caller = 0; caller < 2; ++caller) {
    callers.emplace_back([&, caller] {
      for (std::uint64_t call = 0; call < 10; ++call) matched += round_trip(plane, trip, 100 * caller + call);
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(matched.load(), 20);
}

TEST(DataPlaneSpillTest, ASpillAndAReloadEndNoSoonerThanTheirDeclaredTime) {
  test::TempDir dir;
  SpillRoundTrip trip;
  trip.builder.spec.instructions[static_cast<std::size_t>(trip.spill_a)].declared_us = 30'000;
  trip.builder.spec.instructions[static_cast<std::size_t>(trip.reload_a)].declared_us = 30'000;
  auto program = std::make_shared<const Program>(trip.builder.spec);
  DataPlane plane(program, std::make_shared<IoEngine>(IoEngineOptions{}), 2, dir.root());
  auto memory = plane.begin_call(1.0);
  bool matched = false;
  const RunReport report = plane.run(memory, trip.kernel(*program, memory, 8, matched), {});
  EXPECT_TRUE(matched);
  for (std::int64_t id : {trip.spill_a, trip.reload_a}) {
    const InstructionRecord& record = report.records[static_cast<std::size_t>(id)];
    EXPECT_GE(record.end_us - record.start_us, 30'000 - 1.0) << record.label;
  }
  plane.end_call(memory);
}

// The InvalidArgument or NotFound message of constructing a plane for `program`.
std::string refusal(const std::shared_ptr<const Program>& program, std::shared_ptr<IoEngine> io,
                    const std::string& spill_dir, ErrorCode code = ErrorCode::InvalidArgument) {
  try {
    DataPlane plane(program, std::move(io), 1, spill_dir);
  } catch (const Error& error) {
    return error.code() == code ? error.what() : std::string("wrong code: ") + error.what();
  }
  return "accepted";
}

TEST(DataPlaneSpillTest, AProgramThatSpillsNeedsASpillDirectoryAndAnIoEngine) {
  test::TempDir dir;
  auto program = std::make_shared<const Program>(SpillRoundTrip().builder.spec);
  auto io = std::make_shared<IoEngine>(IoEngineOptions{});
  EXPECT_CONTAINS(refusal(program, io, ""),
                  "spills up to 12288 bytes per call to disk tier 'disk', but was given no spill directory");
  EXPECT_CONTAINS(refusal(program, nullptr, dir.root()), "but was given no I/O engine");
  EXPECT_CONTAINS(refusal(program, io, dir.path("missing"), ErrorCode::NotFound), dir.path("missing"));
}

}  // namespace
}  // namespace tt

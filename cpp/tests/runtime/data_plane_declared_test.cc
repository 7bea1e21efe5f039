// Tests of declared times in the data plane: an instruction ends no sooner than its declared
// time after it starts, waiting for it holds no thread, and a failure is not delayed.
#include "tt/runtime/data_plane.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <stdexcept>

#include "../ir/program_builder.h"
#include "../storage/io_test_support.h"
#include "tt/common/error.h"

namespace tt {
namespace {

using test::ProgramBuilder;

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

TEST(DataPlaneDeclaredTest, AnInstructionEndsNoSoonerThanItsDeclaredTime) {
  test::TempDir dir;
  const std::string path = dir.path("weights.bin");
  const auto bytes = test::random_bytes(4096, 4);
  test::write_file(path, bytes);
  ProgramBuilder b;
  b.host_second_tier();
  b.spec.files = {{path, 4096, 0, {}}};
  const auto range = b.buffer(4096, 2, BufferLifetime::Resident, 0, 0);
  const auto w = b.buffer(4096);
  const auto d = b.buffer(4096, 1);
  const auto load = b.add(InstructionKind::Load, 1, {range}, {w});
  const auto copy = b.add(InstructionKind::Copy, 2, {w}, {d}, {load});
  const auto layer = b.compute({w}, {}, {load});
  b.free({w}, {copy, layer});
  b.spec.outputs = {d};
  const double declared_us[] = {30'000, 40'000, 20'000};  // the load, the copy, the compute
  for (int i = 0; i < 3; ++i) b.spec.instructions[i].declared_us = declared_us[i];
  auto program = std::make_shared<const Program>(b.spec);
  DataPlane plane(program, std::make_shared<IoEngine>(IoEngineOptions{}), 2);
  auto memory = plane.begin_call(1.0);
  const RunReport report = plane.run(memory, [](const Instruction&) {}, {});
  for (int i = 0; i < 3; ++i) {
    const InstructionRecord& record = report.records[i];
    // The timer never fires early; the microsecond allows for the records' rounding.
    EXPECT_GE(record.end_us - record.start_us, declared_us[i] - 1.0) << record.label;
  }
  EXPECT_GE(report.records[3].start_us, report.records[1].end_us);  // the free waited for the delayed copy
  EXPECT_EQ(std::memcmp(memory->address(program->buffer_position(d)), bytes.data(), 4096), 0);
  plane.end_call(memory);
}

TEST(DataPlaneDeclaredTest, ADelayedInstructionHoldsNoThread) {
  ProgramBuilder b;
  b.host_second_tier();
  b.spec.queues.push_back({"ram->dev 2", QueueKind::Link, 1});
  const auto r1 = b.buffer(64, 0, BufferLifetime::Resident), r2 = b.buffer(64, 0, BufferLifetime::Resident);
  const auto d1 = b.buffer(64, 1), d2 = b.buffer(64, 1);
  b.add(InstructionKind::Copy, 2, {r1}, {d1});
  b.add(InstructionKind::Copy, 3, {r2}, {d2});
  for (Instruction& instruction : b.spec.instructions) instruction.declared_us = 100'000;
  b.spec.outputs = {d1, d2};
  auto program = std::make_shared<const Program>(b.spec);
  DataPlane plane(program, nullptr, 1);
  RunOptions options;
  options.caller_runs = false;  // the pool's one worker is the only thread that runs instructions
  auto memory = plane.begin_call(1.0);
  const auto start = std::chrono::steady_clock::now();
  const RunReport report = plane.run(memory, [](const Instruction&) {}, options);
  // Both delays overlap: a worker held for each would take 200 ms.
  EXPECT_LT(elapsed_ms(start), 190.0);
  for (const InstructionRecord& record : report.records) EXPECT_GE(record.end_us - record.start_us, 100'000 - 1.0);
  plane.end_call(memory);
}

TEST(DataPlaneDeclaredTest, TheRunLetsGoOfItsCancelTokenBeforeReturning) {
  // The last completion comes from the timer's thread, which may still hold the run after
  // run() returns; the token (a Python object, from Python) must not be released there.
  // How late that thread lets go is timing: this checks the run holds no reference once it
  // returns, which makes the thread's last release harmless whenever it comes.
  ProgramBuilder b;
  b.host_second_tier();
  const auto r = b.buffer(64, 0, BufferLifetime::Resident);
  const auto d = b.buffer(64, 1);
  b.add(InstructionKind::Copy, 2, {r}, {d});
  b.spec.instructions[0].declared_us = 5'000;
  b.spec.outputs = {d};
  DataPlane plane(std::make_shared<const Program>(b.spec), nullptr, 1);
  for (int attempt = 0; attempt < 20; ++attempt) {
    RunOptions options;
    options.cancel = std::make_shared<CancelToken>();
    auto memory = plane.begin_call(1.0);
    plane.run(memory, [](const Instruction&) {}, options);
    EXPECT_EQ(options.cancel.use_count(), 1);
    plane.end_call(memory);
  }
}

// Runs `spec` once, every instruction declared 5 s, expecting it to fail; returns how long it took.
double failing_run_ms(ProgramSpec spec, const ComputeKernel& compute) {
  for (Instruction& instruction : spec.instructions) instruction.declared_us = 5e6;
  DataPlane plane(std::make_shared<const Program>(std::move(spec)), std::make_shared<IoEngine>(IoEngineOptions{}), 1);
  auto memory = plane.begin_call(1.0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_ANY_THROW(plane.run(memory, compute, {}));
  const double ms = elapsed_ms(start);
  plane.end_call(memory);
  return ms;
}

TEST(DataPlaneDeclaredTest, AFailureIsNotDelayed) {
  ProgramBuilder thrown;
  thrown.spec.outputs = {thrown.buffer(64)};
  thrown.compute({}, {thrown.spec.outputs[0]});
  EXPECT_LT(failing_run_ms(thrown.spec, [](const Instruction&) { throw std::runtime_error("kernel failed"); }), 2500.0);
  test::TempDir dir;
  ProgramBuilder missing;  // the load's I/O error arrives through its completion
  missing.spec.files = {{dir.path("missing.bin"), 64, 0, {}}};
  const auto range = missing.buffer(64, 2, BufferLifetime::Resident, 0, 0);
  missing.spec.outputs = {missing.buffer(64)};
  missing.add(InstructionKind::Load, 1, {range}, {missing.spec.outputs[0]});
  EXPECT_LT(failing_run_ms(missing.spec, [](const Instruction&) {}), 2500.0);
}

}  // namespace
}  // namespace tt

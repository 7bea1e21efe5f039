// Tests of copies that touch a Device tier: the caller's kernel moves the bytes and completes
// them later from its own thread, successors wait for that completion, a failure it reports
// fails the run, and a run without such a kernel is refused naming the copy.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../ir/program_builder.h"
#include "tt/common/error.h"
#include "tt/runtime/data_plane.h"

namespace tt {
namespace {

using test::ProgramBuilder;

// A resident weight in RAM copied to the device (a torch-owned buffer there), which a compute
// reads; then the result copied back. Instructions: 0 copy up, 1 compute, 2 copy down, 3 free.
struct DeviceRoundTrip {
  ProgramBuilder builder;
  std::int64_t weight, on_device, result, back;

  DeviceRoundTrip() {
    builder.spec.queues.push_back({"dev->ram", QueueKind::Link, 1});
    weight = builder.buffer(256, 0, BufferLifetime::Resident);
    on_device = builder.buffer(256, 1);
    result = builder.buffer(64, 1);
    back = builder.buffer(64, 0);
    for (auto& buffer : builder.spec.buffers) buffer.torch_owned = buffer.tier == 1;
    const auto up = builder.add(InstructionKind::Copy, 2, {weight}, {on_device});
    const auto compute = builder.compute({on_device}, {result}, {up});
    const auto down = builder.add(InstructionKind::Copy, 3, {result}, {back}, {compute});
    builder.free({on_device, result}, {compute, down});
    builder.spec.outputs = {back};
  }
};

// Completes the copies it is given from a thread of its own, after a delay, in order: a
// device's event seen by the thread that waits for it.
class LateCompleter {
 public:
  explicit LateCompleter(std::exception_ptr failure = nullptr) : failure_(std::move(failure)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~LateCompleter() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    thread_.join();
  }
  DeviceCopyKernel kernel() {
    return [this](const Instruction& instruction, Finish done) {
      std::lock_guard lock(mutex_);
      started_.push_back(instruction.id);
      pending_.push_back(std::move(done));
      ready_.notify_all();
    };
  }
  std::vector<std::int64_t> started() {
    std::lock_guard lock(mutex_);
    return started_;
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (true) {
      ready_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;
      Finish done = std::move(pending_.front());
      pending_.pop_front();
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done(failure_);
      lock.lock();
    }
  }

  std::exception_ptr failure_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Finish> pending_;
  std::vector<std::int64_t> started_;
  bool stopping_ = false;
  std::thread thread_;
};

TEST(DataPlaneDeviceCopyTest, TheCallersKernelMovesDeviceBytesAndItsCompletionReleasesTheSuccessors) {
  DeviceRoundTrip trip;
  auto program = std::make_shared<const Program>(trip.builder.spec);
  DataPlane plane(program, nullptr, 1);
  LateCompleter completer;
  auto memory = plane.begin_call(1.0);
  std::vector<std::int64_t> computed;
  const RunReport report = plane.run(
      memory, [&](const Instruction& instruction) { computed.push_back(instruction.id); }, {}, completer.kernel());
  EXPECT_EQ(completer.started(), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(computed, (std::vector<std::int64_t>{1}));
  const auto& records = report.records;
  EXPECT_GE(records[0].end_us - records[0].start_us, 19'000.0);  // ended when the completer said so
  EXPECT_GE(records[1].start_us, records[0].end_us);
  EXPECT_GE(records[2].start_us, records[1].end_us);
  EXPECT_EQ(records[0].bytes, 256);
  // The device's buffers are counted on its tier though the core never held their bytes.
  EXPECT_EQ(memory->peak_bytes()[1], 256 + 64);
  plane.end_call(memory);
}

TEST(DataPlaneDeviceCopyTest, AFailureTheKernelReportsFailsTheRun) {
  DeviceRoundTrip trip;
  DataPlane plane(std::make_shared<const Program>(trip.builder.spec), nullptr, 1);
  LateCompleter completer(std::make_exception_ptr(std::runtime_error("device lost")));
  auto memory = plane.begin_call(1.0);
  bool computed = false;
  EXPECT_THROW(
      {
        try {
          plane.run(memory, [&](const Instruction&) { computed = true; }, {}, completer.kernel());
        } catch (const std::runtime_error& error) {
          EXPECT_STREQ(error.what(), "device lost");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_FALSE(computed);
  plane.end_call(memory);
}

TEST(DataPlaneDeviceCopyTest, ARunWithoutADeviceCopyKernelIsRefusedNamingTheCopy) {
  DeviceRoundTrip trip;
  DataPlane plane(std::make_shared<const Program>(trip.builder.spec), nullptr, 1);
  auto memory = plane.begin_call(1.0);
  try {
    plane.run(memory, [](const Instruction&) {}, {});
    ADD_FAILURE() << "the run went through";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_CONTAINS(error.what(), "copy 0 ('copy0') touches a device tier");
  }
  plane.end_call(memory);
}

TEST(DataPlaneDeviceCopyTest, TheHostArenasACallUsesAreListedForPinningAndRecurFromCallToCall) {
  DeviceRoundTrip trip;
  auto program = std::make_shared<const Program>(trip.builder.spec);
  DataPlane plane(program, nullptr, 1);
  auto first = plane.begin_call(1.0);
  const auto arenas = first->host_arenas();
  ASSERT_EQ(arenas.size(), 2u);  // the resident weight's arena, then the call's own (the copy back lands there)
  const auto inside = [](std::pair<std::uintptr_t, std::int64_t> arena, const std::byte* address) {
    const auto at = reinterpret_cast<std::uintptr_t>(address);
    return at >= arena.first && at < arena.first + static_cast<std::uintptr_t>(arena.second);
  };
  EXPECT_TRUE(inside(arenas[0], first->address(program->buffer_position(trip.weight))));
  EXPECT_TRUE(inside(arenas[1], first->address(program->buffer_position(trip.back))));
  plane.end_call(first);  // its arena goes back to the pool, though `first` is still held
  EXPECT_EQ(first->host_arenas().size(), 1u);
  auto second = plane.begin_call(1.0);
  EXPECT_EQ(second->host_arenas(), arenas);  // the same arenas: pinned once, they stay pinned
  plane.end_call(second);
}

}  // namespace
}  // namespace tt

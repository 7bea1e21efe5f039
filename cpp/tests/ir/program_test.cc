// Tests of Program validation: each rule rejects what it must, naming the instruction and the buffer.
#include "tt/ir/program.h"

#include <gtest/gtest.h>

#include <limits>

#include "program_builder.h"

namespace tt {
namespace {

using test::ProgramBuilder;
using test::rejection;

// weights (file range) -Load-> w (host) ; compute(x, w) -> y ; free w ; y is the output.
ProgramBuilder streamed_layer() {
  ProgramBuilder b;
  const auto file_range = b.buffer(4096, 2, BufferLifetime::Resident, 0, 8192);
  const auto w = b.buffer(4096);
  const auto x = b.buffer(256, 0, BufferLifetime::Input);
  const auto y = b.buffer(256);
  const auto load = b.add(InstructionKind::Load, 1, {file_range}, {w});
  const auto layer = b.compute({x, w}, {y}, {load});
  b.free({w}, {layer});
  b.spec.outputs = {y};
  return b;
}

TEST(ProgramTest, AcceptsAStreamedLayer) {
  Program program(streamed_layer().spec);
  EXPECT_EQ(program.schedule()->size(), 3u);
  EXPECT_EQ(program.buffers().size(), 4u);
  EXPECT_EQ(program.buffer_position(101), 1u);
  EXPECT_THROW(program.buffer_position(7), Error);
}

TEST(ProgramTest, RejectsReadBeforeWrite) {
  auto b = streamed_layer();
  b.spec.instructions[1].deps.clear();  // the layer no longer waits for its load
  EXPECT_CONTAINS(rejection(b.spec), "compute 1 ('compute1') may read buffer 101 ('b101') before load 0");
}

TEST(ProgramTest, RejectsAReadOfABufferNothingWrites) {
  ProgramBuilder b;
  const auto a = b.buffer(64);
  b.compute({a}, {});
  EXPECT_CONTAINS(rejection(b.spec), "compute 0 ('compute0') reads buffer 100 ('b100'), which nothing writes");
}

TEST(ProgramTest, RejectsUseAfterFree) {
  auto b = streamed_layer();
  const auto late = b.compute({101}, {}, {2});  // reads w after its free
  (void)late;
  EXPECT_CONTAINS(rejection(b.spec), "compute 3 ('compute3') may use buffer 101 ('b101') after free 2");
}

TEST(ProgramTest, RejectsAFreeThatDoesNotWaitForEveryReader) {
  auto b = streamed_layer();
  b.compute({101}, {}, {0});  // a second reader, unordered with the free
  EXPECT_CONTAINS(rejection(b.spec), "may use buffer 101 ('b101') after free 2");
}

TEST(ProgramTest, RejectsDoubleFree) {
  auto b = streamed_layer();
  b.free({101}, {2});
  EXPECT_CONTAINS(rejection(b.spec), "double free: free 2 ('free2') and free 3 ('free3') both free buffer 101");
}

TEST(ProgramTest, RejectsATransientNeverFreed) {
  auto b = streamed_layer();
  b.spec.instructions.pop_back();
  EXPECT_CONTAINS(rejection(b.spec), "buffer 101 ('b101') is never freed");
}

TEST(ProgramTest, RejectsFreeingAResidentOrAnOutput) {
  auto resident = streamed_layer();
  resident.free({100}, {2});
  EXPECT_CONTAINS(rejection(resident.spec), "frees buffer 100 ('b100'), which is resident");
  auto output = streamed_layer();
  output.free({103}, {1});
  EXPECT_CONTAINS(rejection(output.spec), "output buffer 103 ('b103') is freed by free 3");
}

TEST(ProgramTest, RejectsUnorderedWritersAndWritesToReadOnlyBuffers) {
  ProgramBuilder b;
  const auto a = b.buffer(64);
  b.compute({}, {a});
  b.compute({}, {a});
  b.free({a}, {0, 1});
  EXPECT_CONTAINS(rejection(b.spec), "both write buffer 100 ('b100') with no order between them");
  auto input = streamed_layer();
  input.compute({}, {102});
  EXPECT_CONTAINS(rejection(input.spec), "writes buffer 102 ('b102'), which is read-only (an input)");
}

TEST(ProgramTest, RejectsUnknownQueuesAndBuffers) {
  auto queue = streamed_layer();
  queue.spec.instructions[1].queue = 9;
  EXPECT_CONTAINS(rejection(queue.spec), "compute 1 ('compute1'): unknown queue 9 (the program has 3)");
  auto unknown = streamed_layer();
  unknown.spec.instructions[1].reads.push_back(55);
  EXPECT_CONTAINS(rejection(unknown.spec), "compute 1 ('compute1'): unknown buffer 55");
}

TEST(ProgramTest, RejectsOperandsThatDoNotFitTheKind) {
  auto wrong_queue = streamed_layer();
  wrong_queue.spec.instructions[0].queue = 0;
  EXPECT_CONTAINS(rejection(wrong_queue.spec), "load 0 ('load0'): runs on a io queue, got a compute queue");
  auto sizes = streamed_layer();
  sizes.spec.buffers[1].bytes = 100;
  EXPECT_CONTAINS(rejection(sizes.spec), "buffer 100 ('b100') holds 4096 bytes but buffer 101 ('b101') holds 100");
  auto compute_on_disk = streamed_layer();
  compute_on_disk.compute({100}, {});
  EXPECT_CONTAINS(rejection(compute_on_disk.spec), "cannot compute on buffer 100 ('b100'), which is on disk");
  ProgramBuilder copy;
  const auto h = copy.buffer(64);
  const auto d = copy.buffer(64, 1);
  copy.compute({}, {h});
  copy.add(InstructionKind::Copy, 2, {h}, {d, h}, {0});
  EXPECT_CONTAINS(rejection(copy.spec), "reads 1 buffers but writes 2; a copy pairs them");
}

TEST(ProgramTest, RejectsMalformedBuffersTiersAndQueues) {
  auto outside = streamed_layer();
  outside.spec.buffers[0].file_offset = (1 << 20) - 100;
  EXPECT_CONTAINS(rejection(outside.spec), "lie outside 'weights.bin' (1048576 bytes)");
  auto far = streamed_layer();  // offset + bytes would overflow (found by the fuzzer)
  far.spec.buffers[0].file_offset = std::numeric_limits<std::int64_t>::max() - 100;
  EXPECT_CONTAINS(rejection(far.spec), "bytes at offset 9223372036854775707 lie outside 'weights.bin'");
  auto alignment = streamed_layer();
  alignment.spec.buffers[1].alignment = 48;
  EXPECT_CONTAINS(rejection(alignment.spec), "alignment must be a power of two, got 48");
  auto phase = streamed_layer();
  phase.spec.buffers[1].phase = 64;
  EXPECT_CONTAINS(rejection(phase.spec), "phase must be in [0, alignment 64), got 64");
  auto tier = streamed_layer();
  tier.spec.buffers[1].tier = 5;
  EXPECT_CONTAINS(rejection(tier.spec), "unknown tier 5");
  auto queue = streamed_layer();
  queue.spec.queues[1].capacity = 0;
  EXPECT_CONTAINS(rejection(queue.spec), "queue 'io': capacity must be >= 1, got 0");
  auto duplicate = streamed_layer();
  duplicate.spec.buffers[2].id = 100;
  EXPECT_CONTAINS(rejection(duplicate.spec), "duplicate buffer id 100");
  auto digests = streamed_layer();
  digests.spec.files[0].chunk_bytes = 1 << 19;
  EXPECT_CONTAINS(rejection(digests.spec), "one digest per chunk (2), got 0 digests");
  // Found by make fuzz: a size near 2^63 once overflowed while its chunks were counted.
  auto huge = streamed_layer();
  huge.spec.files[0].bytes = std::numeric_limits<std::int64_t>::max() - 255;
  huge.spec.files[0].chunk_bytes = 11263;
  EXPECT_CONTAINS(rejection(huge.spec), "one digest per chunk (818908997323518), got 0 digests");
  // Found by make fuzz: resident sizes near 2^63 once overflowed as the memory plan summed them.
  auto enormous = streamed_layer();
  enormous.spec.buffers[1].bytes = (std::int64_t{1} << 60) - 100;
  EXPECT_CONTAINS(rejection(enormous.spec), "bytes take the program's buffers past 1152921504606846976 bytes in all");
  auto aligned = streamed_layer();
  aligned.spec.buffers[1].alignment = std::int64_t{1} << 31;
  EXPECT_CONTAINS(rejection(aligned.spec), "alignment 2147483648 is above the limit of 1073741824");
}

TEST(ProgramTest, AFileRangesChecksumIsA32BitValueOnAFileRange) {
  auto good = streamed_layer();
  good.spec.buffers[0].crc32c = 0xFFFFFFFFll;
  Program program(good.spec);
  auto too_wide = streamed_layer();
  too_wide.spec.buffers[0].crc32c = 1ll << 32;
  EXPECT_CONTAINS(rejection(too_wide.spec), "crc32c is the checksum of a file range, a 32-bit value or -1; got 4294967296");
  auto not_a_range = streamed_layer();
  not_a_range.spec.buffers[1].crc32c = 7;
  EXPECT_CONTAINS(rejection(not_a_range.spec), "on a buffer that is not a file range");
}

TEST(ProgramTest, ADeclaredTimeIsFiniteAndNotNegative) {
  auto declared = streamed_layer();
  declared.spec.instructions[0].declared_us = 250.0;
  EXPECT_EQ(Program(declared.spec).schedule()->instructions()[0].declared_us, 250.0);
  for (double bad : {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    auto b = streamed_layer();
    b.spec.instructions[1].declared_us = bad;
    EXPECT_CONTAINS(rejection(b.spec), "compute 1 ('compute1'): declared_us must be finite and >= 0, got ");
  }
}

TEST(ProgramTest, ScheduleRulesStillApply) {
  auto cycle = streamed_layer();
  cycle.spec.instructions[0].deps = {2};
  EXPECT_CONTAINS(rejection(cycle.spec), "dependency cycle");
}

TEST(ProgramTest, SpillAndReloadRoundTrip) {
  ProgramBuilder b;
  const auto h = b.buffer(4096);
  const auto spilled = b.buffer(4096, 2);
  const auto back = b.buffer(4096);
  const auto make = b.compute({}, {h});
  const auto spill = b.add(InstructionKind::Spill, 1, {h}, {spilled}, {make});
  const auto drop = b.free({h}, {spill});
  const auto reload = b.add(InstructionKind::Reload, 1, {spilled}, {back}, {drop});
  const auto done = b.free({spilled}, {reload});
  b.compute({back}, {}, {reload});
  b.free({back}, {5});
  (void)done;
  Program program(b.spec);
  EXPECT_EQ(program.memory_plan().arena_bytes[2], 4096);  // the spill file holds one buffer
  auto wrong = b;
  wrong.spec.instructions[1].writes = {back};
  EXPECT_CONTAINS(rejection(wrong.spec), "spill 1 ('spill1'): moves bytes from a host tier to a disk tier");
  auto torch_owned = b;
  torch_owned.spec.buffers[1].torch_owned = true;  // torch has no place in the spill file
  EXPECT_CONTAINS(rejection(torch_owned.spec), "buffer 101 ('b101'): a disk buffer cannot be torch-owned");
}

}  // namespace
}  // namespace tt

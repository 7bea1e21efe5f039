// libFuzzer target of the program reader: a ProgramSpec built from the input's bytes, as a
// saved or planned program could describe it (make fuzz).
//
// Program's constructor validates tiers, queues, files, buffers, operands, lifetimes and the
// schedule, then plans the arenas. A tt::Error is the expected way to refuse a spec; any
// other exception, a crash, a sanitizer report or an accepted program whose memory plan
// breaks its own invariants is a bug. Ids and indexes are drawn from small ranges, past both
// ends, so that most references resolve and the validation past them is reached.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tt/common/error.h"
#include "tt/ir/program.h"

namespace {

template <typename Enum>
Enum pick_enum(FuzzedDataProvider& in, std::int32_t last) {
  return static_cast<Enum>(in.ConsumeIntegralInRange<std::int32_t>(-1, last + 1));
}

std::int64_t small_size(FuzzedDataProvider& in) {
  // Mostly small, sometimes at the edges of int64.
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return in.ConsumeIntegral<std::int64_t>();
    case 1: return -in.ConsumeIntegralInRange<std::int64_t>(0, 64);
    default: return in.ConsumeIntegralInRange<std::int64_t>(0, 1 << 16);
  }
}

std::vector<std::int64_t> ids(FuzzedDataProvider& in, std::int64_t below) {
  std::vector<std::int64_t> out(in.ConsumeIntegralInRange<std::size_t>(0, 3));
  for (std::int64_t& id : out) id = in.ConsumeIntegralInRange<std::int64_t>(-1, below);
  return out;
}

tt::ProgramSpec spec_of(FuzzedDataProvider& in) {
  tt::ProgramSpec spec;
  spec.tiers.resize(in.ConsumeIntegralInRange<std::size_t>(0, 3));
  for (tt::Tier& tier : spec.tiers) {
    tier.name = in.ConsumeRandomLengthString(8);
    tier.kind = pick_enum<tt::TierKind>(in, 2);
    tier.capacity_bytes = in.ConsumeBool() ? small_size(in) : tier.capacity_bytes;
  }
  spec.queues.resize(in.ConsumeIntegralInRange<std::size_t>(0, 3));
  for (tt::Queue& queue : spec.queues) {
    queue.name = in.ConsumeRandomLengthString(8);
    queue.kind = pick_enum<tt::QueueKind>(in, 2);
    queue.capacity = in.ConsumeIntegralInRange<std::int32_t>(-1, 4);
  }
  spec.files.resize(in.ConsumeIntegralInRange<std::size_t>(0, 2));
  for (tt::FileSpec& file : spec.files) {
    file.path = "/nonexistent/" + in.ConsumeRandomLengthString(8);
    file.bytes = small_size(in);
    file.chunk_bytes = in.ConsumeBool() ? 0 : small_size(in);
    file.chunk_sha256.resize(in.ConsumeIntegralInRange<std::size_t>(0, 2), std::string(64, 'a'));
  }
  const std::int64_t buffer_ids = in.ConsumeIntegralInRange<std::int64_t>(0, 12);
  spec.buffers.resize(static_cast<std::size_t>(buffer_ids));
  for (std::size_t i = 0; i < spec.buffers.size(); ++i) {
    tt::Buffer& buffer = spec.buffers[i];
    buffer.id = in.ConsumeBool() ? static_cast<std::int64_t>(i) : in.ConsumeIntegralInRange<std::int64_t>(-1, 12);
    buffer.tier = in.ConsumeIntegralInRange<std::int32_t>(-1, static_cast<std::int32_t>(spec.tiers.size()));
    buffer.bytes = small_size(in);
    buffer.alignment = in.ConsumeBool() ? 64 : small_size(in);
    buffer.lifetime = pick_enum<tt::BufferLifetime>(in, 2);
    buffer.file = in.ConsumeIntegralInRange<std::int32_t>(-1, static_cast<std::int32_t>(spec.files.size()));
    buffer.file_offset = small_size(in);
    buffer.torch_owned = in.ConsumeBool();
    buffer.phase = in.ConsumeBool() ? 0 : small_size(in);
  }
  const std::size_t count = in.ConsumeIntegralInRange<std::size_t>(0, 16);
  spec.instructions.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    tt::Instruction& instruction = spec.instructions[i];
    instruction.id = in.ConsumeBool() ? static_cast<std::int64_t>(i) : in.ConsumeIntegralInRange<std::int64_t>(-1, 17);
    instruction.kind = static_cast<tt::InstructionKind>(in.ConsumeIntegralInRange<std::int32_t>(-1, 7));
    instruction.region = in.ConsumeIntegralInRange<std::int32_t>(-1, 4);
    instruction.deps = ids(in, static_cast<std::int64_t>(count));
    instruction.declared_us = in.ConsumeBool() ? 0.0 : in.ConsumeFloatingPoint<double>();
    instruction.queue = in.ConsumeIntegralInRange<std::int32_t>(-1, static_cast<std::int32_t>(spec.queues.size()));
    instruction.reads = ids(in, buffer_ids);
    instruction.writes = ids(in, buffer_ids);
  }
  spec.outputs = ids(in, buffer_ids);
  return spec;
}

// An accepted program's arenas hold every buffer placed in them.
void check_memory_plan(const tt::Program& program) {
  const tt::MemoryPlan& plan = program.memory_plan();
  if (plan.offsets.size() != program.buffers().size()) std::abort();
  for (std::size_t i = 0; i < plan.offsets.size(); ++i) {
    const tt::Buffer& buffer = program.buffers()[i];
    const std::int64_t offset = plan.offsets[i];
    if (offset < 0) continue;
    if (offset + buffer.bytes > plan.arena_bytes[static_cast<std::size_t>(buffer.tier)]) std::abort();
  }
  for (std::size_t tier = 0; tier < program.tiers().size(); ++tier) {
    if (plan.peak_bytes[tier] > plan.arena_bytes[tier]) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  tt::ProgramSpec spec = spec_of(in);
  std::vector<tt::Instruction> instructions = spec.instructions;
  try {
    check_memory_plan(tt::Program(std::move(spec)));
  } catch (const tt::Error&) {
  }
  // The schedule's own rules (ids, dependencies, cycles) on their own.
  try {
    tt::Schedule schedule(std::move(instructions));
  } catch (const tt::Error&) {
  }
  return 0;
}

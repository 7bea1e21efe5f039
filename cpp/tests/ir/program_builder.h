// A small builder of program specs for the IR, memory and executor tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tt/common/error.h"
#include "tt/ir/program.h"

namespace tt::test {

// Tiers: 0 = "ram" (host), 1 = "dev" (device), 2 = "disk". Queues: 0 = "cpu" (compute,
// 2 slots), 1 = "io" (depth 4), 2 = "ram->dev" (link). File 0: "weights.bin", 1 MiB.
struct ProgramBuilder {
  ProgramSpec spec;

  explicit ProgramBuilder(std::int64_t ram_bytes = 1 << 20, std::int64_t dev_bytes = 1 << 20) {
    spec.tiers = {{"ram", TierKind::Host, ram_bytes}, {"dev", TierKind::Device, dev_bytes},
                  {"disk", TierKind::Disk, 1 << 20}};
    spec.queues = {{"cpu", QueueKind::Compute, 2}, {"io", QueueKind::Io, 4}, {"ram->dev", QueueKind::Link, 1}};
    spec.files = {{"weights.bin", 1 << 20, 0, {}}};
  }

  // Adds a buffer and returns its id (ids count up from 100 so they differ from instruction ids).
  std::int64_t buffer(std::int64_t bytes, std::int32_t tier = 0, BufferLifetime lifetime = BufferLifetime::Transient,
                      std::int32_t file = -1, std::int64_t file_offset = 0) {
    Buffer buffer;
    buffer.id = 100 + static_cast<std::int64_t>(spec.buffers.size());
    buffer.tier = tier;
    buffer.bytes = bytes;
    buffer.lifetime = lifetime;
    buffer.file = file;
    buffer.file_offset = file_offset;
    buffer.label = "b" + std::to_string(buffer.id);
    spec.buffers.push_back(buffer);
    return buffer.id;
  }

  // Adds an instruction (ids count up from 0) and returns its id.
  std::int64_t add(InstructionKind kind, std::int32_t queue, std::vector<std::int64_t> reads,
                   std::vector<std::int64_t> writes, std::vector<std::int64_t> deps = {}) {
    Instruction instruction;
    instruction.id = static_cast<std::int64_t>(spec.instructions.size());
    instruction.kind = kind;
    instruction.queue = queue;
    instruction.region = kind == InstructionKind::Compute ? static_cast<std::int32_t>(instruction.id) : -1;
    instruction.label = std::string(instruction_kind_name(kind)) + std::to_string(instruction.id);
    instruction.reads = std::move(reads);
    instruction.writes = std::move(writes);
    instruction.deps = std::move(deps);
    spec.instructions.push_back(instruction);
    return instruction.id;
  }
  std::int64_t compute(std::vector<std::int64_t> reads, std::vector<std::int64_t> writes,
                       std::vector<std::int64_t> deps = {}) {
    return add(InstructionKind::Compute, 0, std::move(reads), std::move(writes), std::move(deps));
  }
  std::int64_t free(std::vector<std::int64_t> buffers, std::vector<std::int64_t> deps) {
    return add(InstructionKind::Free, 0, std::move(buffers), {}, std::move(deps));
  }
};

// Builds a program that must be rejected with `code`; returns the message.
inline std::string rejection(ProgramSpec spec, ErrorCode code = ErrorCode::InvalidArgument) {
  try {
    Program program(std::move(spec));
  } catch (const Error& error) {
    if (error.code() != code) return std::string("wrong code: ") + error.what();
    return error.what();
  }
  return "accepted";
}

// Passes when `text` contains `part`, and shows both otherwise.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}
#define EXPECT_CONTAINS(text, part) EXPECT_TRUE(::tt::test::contains((text), (part)))

}  // namespace tt::test

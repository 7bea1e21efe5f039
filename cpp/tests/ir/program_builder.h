// A small builder of program specs for the IR, memory and executor tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
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

  // Makes tier 1 a second host tier, whose copies the data plane runs natively (a Device
  // tier's bytes are the caller's to move: see DeviceCopyKernel).
  void host_second_tier() { spec.tiers[1].kind = TierKind::Host; }

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

// A random valid program: each step computes from up to two live buffers into a new one;
// frees come after a buffer's last user. With `movement`, steps may also load a range of
// weights.bin into RAM (io queue) or copy a live buffer between RAM and the device (link),
// and computes may read a resident weight on either tier. Without it, the draws are the
// ones the memory plan tests were written against.
inline ProgramSpec random_program(std::mt19937& random, bool movement = false) {
  ProgramBuilder b(1 << 30, 1 << 30);
  std::vector<std::int64_t> weights;
  if (movement) weights = {b.buffer(192, 0, BufferLifetime::Resident), b.buffer(64, 1, BufferLifetime::Resident)};
  // Live buffers, each with the instructions touching it, its writer first.
  std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> live;
  auto tier_of = [&](std::int64_t id) { return b.spec.buffers[static_cast<std::size_t>(id - 100)].tier; };
  for (int step = 0; step < 24; ++step) {
    const unsigned kind = movement ? random() % 4 : 0;  // 0, 1: compute, 2: load, 3: copy
    std::int64_t id = 0;
    std::int64_t out = 0;
    std::vector<std::int64_t> reads, deps;
    if (kind == 2) {
      const std::int64_t bytes = 64 * (1 + random() % 8);
      const auto range = b.buffer(bytes, 2, BufferLifetime::Resident, 0, 4096 * (random() % 16));
      out = b.buffer(bytes);
      id = b.add(InstructionKind::Load, 1, {range}, {out});
    } else if (kind == 3 && !live.empty()) {
      auto& [source, users] = live[random() % live.size()];
      reads = {source};
      out = b.buffer(b.spec.buffers[static_cast<std::size_t>(source - 100)].bytes, 1 - tier_of(source));
      id = b.add(InstructionKind::Copy, 2, {source}, {out}, {users.front()});
    } else {
      for (int k = 0; k < 2 && !live.empty(); ++k) {
        auto& [buffer, users] = live[random() % live.size()];
        if (std::find(reads.begin(), reads.end(), buffer) != reads.end()) continue;
        reads.push_back(buffer);
        deps.push_back(users.front());  // the writer
      }
      const std::int64_t bytes = 64 * (1 + random() % 8);
      out = b.buffer(bytes, movement ? static_cast<std::int32_t>(random() % 2) : 0);
      std::sort(deps.begin(), deps.end());
      deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
      std::vector<std::int64_t> operands = reads;
      if (movement && random() % 2 == 0) operands.push_back(weights[random() % 2]);
      id = b.compute(operands, {out}, deps);
    }
    for (auto& [buffer, users] : live) {
      if (std::find(reads.begin(), reads.end(), buffer) != reads.end()) users.push_back(id);
    }
    live.push_back({out, {id}});
    if (live.size() > 3 || random() % 3 == 0) {  // free a random live buffer after all its users
      const std::size_t victim = random() % live.size();
      b.free({live[victim].first}, live[victim].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  for (const auto& [buffer, users] : live) b.spec.outputs.push_back(buffer);
  return b.spec;
}

// compute -> x -> compute -> y -> compute -> z (an output), each buffer of `bytes` freed
// after its reader: instructions 0..4 are c0, c1, free x, c3, free y. Returns {x, y, z}.
inline std::vector<std::int64_t> add_chain_of_three(ProgramBuilder& b, std::int64_t bytes) {
  const auto x = b.buffer(bytes), y = b.buffer(bytes), z = b.buffer(bytes);
  const auto c0 = b.compute({}, {x});
  const auto c1 = b.compute({x}, {y}, {c0});
  b.free({x}, {c1});
  const auto c3 = b.compute({y}, {z}, {c1});
  b.free({y}, {c3});
  b.spec.outputs = {z};
  return {x, y, z};
}

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

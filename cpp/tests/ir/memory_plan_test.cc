// Tests of the static memory plan: offsets, reuse, reuse dependencies, capacity, and safety in every run order.
#include "tt/ir/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "program_builder.h"

namespace tt {
namespace {

using test::ProgramBuilder;

TEST(MemoryPlanTest, AChainReusesTheSpaceOfFreedBuffers) {
  ProgramBuilder b;
  test::add_chain_of_three(b, 128);
  Program program(b.spec);
  const MemoryPlan& plan = program.memory_plan();
  EXPECT_EQ(plan.arena_bytes[0], 256);
  EXPECT_EQ(plan.peak_bytes[0], 256);
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);  // z takes x's place
  EXPECT_NE(plan.offsets[0], plan.offsets[1]);
  // c3 writes z into x's bytes, so it must wait for x's free, which it did not.
  EXPECT_EQ(plan.reuse_deps, (std::vector<std::pair<std::size_t, std::size_t>>{{2, 3}}));
}

TEST(MemoryPlanTest, ResidentsComeFirstAndInputsAndFileRangesTakeNoArena) {
  ProgramBuilder b;
  const auto weight = b.buffer(100, 0, BufferLifetime::Resident);
  const auto input = b.buffer(4096, 0, BufferLifetime::Input);
  const auto range = b.buffer(4096, 2, BufferLifetime::Resident, 0, 0);
  const auto out = b.buffer(64);
  b.compute({weight, input}, {out});
  b.spec.outputs = {out};
  (void)range;
  Program program(b.spec);
  const MemoryPlan& plan = program.memory_plan();
  EXPECT_EQ(plan.offsets, (std::vector<std::int64_t>{0, -1, -1, 128}));  // 100 resident bytes, then aligned to 64
  EXPECT_EQ(plan.resident_bytes[0], 100);
  EXPECT_EQ(plan.arena_bytes[0], 192);
  EXPECT_EQ(plan.arena_bytes[2], 0);
}

TEST(MemoryPlanTest, APhasedBufferStartsItsPhasePastAnAlignedOffset) {
  ProgramBuilder b;
  const auto weight = b.buffer(100, 0, BufferLifetime::Resident);
  const auto loaded = b.buffer(5000, 0, BufferLifetime::Resident);
  const auto first = b.buffer(64);
  const auto second = b.buffer(8192);
  b.spec.buffers[1].alignment = b.spec.buffers[3].alignment = 4096;
  b.spec.buffers[1].phase = 8;
  b.spec.buffers[3].phase = 4000;
  b.compute({weight, loaded}, {first, second});
  b.spec.outputs = {first, second};
  Program program(b.spec);
  const MemoryPlan& plan = program.memory_plan();
  (void)weight, (void)loaded, (void)first, (void)second;  // ids; the plan is indexed by position
  EXPECT_EQ(plan.offsets[0], 0);
  EXPECT_EQ(plan.offsets[1], 4096 + 8);  // 8 is taken by the first 100 resident bytes
  EXPECT_EQ(plan.offsets[3] % 4096, 4000);
  // The call's arena starts at owned_resident_bytes: aligned for its most aligned buffer, so
  // the buffer's address there keeps its phase.
  EXPECT_EQ(plan.owned_resident_bytes[0] % 4096, 0);
  EXPECT_EQ((plan.offsets[3] - plan.owned_resident_bytes[0]) % 4096, 4000);
  EXPECT_EQ(plan.resident_bytes[0], 4096 + 8 + 5000);  // the residents end there, gap included
  EXPECT_GE(plan.offsets[3], plan.offsets[1] + 5000);
}

TEST(MemoryPlanTest, TorchOwnedBuffersAreCountedButNotInTheCoresArena) {
  ProgramBuilder b;
  const auto weight = b.buffer(256, 0, BufferLifetime::Resident);  // the core's
  const auto model_weight = b.buffer(512, 0, BufferLifetime::Resident);
  const auto activation = b.buffer(1024);
  const auto loaded = b.buffer(128);
  b.spec.buffers[1].torch_owned = true;
  b.spec.buffers[2].torch_owned = true;
  const auto c0 = b.compute({weight, model_weight}, {activation, loaded});
  const auto c1 = b.compute({activation, loaded}, {}, {c0});
  b.free({activation, loaded}, {c1});
  Program program(b.spec);
  const MemoryPlan& plan = program.memory_plan();
  EXPECT_EQ(plan.owned_resident_bytes[0], 256);
  EXPECT_EQ(plan.owned_bytes[0], 256 + 128);
  EXPECT_EQ(plan.resident_bytes[0], 256 + 512);
  EXPECT_EQ(plan.arena_bytes[0], 256 + 128 + 512 + 1024);
  EXPECT_EQ(plan.peak_bytes[0], plan.arena_bytes[0]);
  EXPECT_EQ(plan.offsets, (std::vector<std::int64_t>{0, 0, 512, 256}));
  EXPECT_EQ(program.first_writes()[0], (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(program.frees()[2], (std::vector<std::size_t>{2, 3}));
  EXPECT_TRUE(program.frees()[0].empty());
}

TEST(MemoryPlanTest, ReuseAcrossUnorderedBranchesAddsADependency) {
  ProgramBuilder b;
  const auto x = b.buffer(256);
  const auto y = b.buffer(256);
  const auto c0 = b.compute({}, {x});
  const auto c1 = b.compute({x}, {}, {c0});
  const auto free_x = b.free({x}, {c1});
  const auto c3 = b.compute({}, {y});  // an independent branch, after x's free in the plan's order
  b.free({y}, {c3});
  Program program(b.spec);
  const MemoryPlan& plan = program.memory_plan();
  EXPECT_EQ(plan.offsets[0], plan.offsets[1]);
  EXPECT_EQ(plan.arena_bytes[0], 256);
  ASSERT_EQ(plan.reuse_deps.size(), 1u);
  EXPECT_EQ(plan.reuse_deps[0], (std::pair<std::size_t, std::size_t>{2, 3}));
  const auto& deps = program.schedule()->instructions()[3].deps;
  EXPECT_NE(std::find(deps.begin(), deps.end(), free_x), deps.end());
}

TEST(MemoryPlanTest, ATierOverCapacityIsRejectedWithBothFigures) {
  ProgramBuilder b(/*ram_bytes=*/1000);
  const auto weight = b.buffer(600, 0, BufferLifetime::Resident);
  const auto out = b.buffer(600);
  b.compute({weight}, {out});
  b.spec.outputs = {out};
  EXPECT_CONTAINS(test::rejection(b.spec, ErrorCode::ResourceExhausted),
                  "tier 'ram' needs 1240 bytes (600 resident) but its capacity is 1000 bytes");
}

// Every run order of a random program's final schedule (instructions overlapping at
// random) must keep live buffers of one tier apart in its arena.
void expect_no_run_order_overlaps(bool movement) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 60; ++trial) {
    const Program program(test::random_program(random, movement));
    const Schedule& schedule = *program.schedule();
    const MemoryPlan& plan = program.memory_plan();
    std::map<std::int64_t, std::size_t> position;  // buffer id -> position
    for (std::size_t i = 0; i < program.buffers().size(); ++i) position[program.buffers()[i].id] = i;
    for (int order = 0; order < 20; ++order) {
      std::vector<std::size_t> waiting(schedule.size());
      for (std::size_t i = 0; i < schedule.size(); ++i) waiting[i] = schedule.dependency_count(i);
      std::vector<std::size_t> ready = schedule.roots(), running;
      std::map<std::size_t, std::pair<std::int64_t, std::int64_t>> held;  // buffer position -> [begin, end)
      std::size_t finished = 0;
      while (finished < schedule.size()) {
        // Start a ready instruction or finish a running one, at random.
        const bool start = !ready.empty() && (running.empty() || random() % 2 == 0);
        if (start) {
          const std::size_t pick = random() % ready.size();
          const std::size_t p = ready[pick];
          ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(pick));
          for (std::int64_t id : schedule.instructions()[p].writes) {
            const std::size_t b = position[id];
            if (held.count(b)) continue;
            const std::int32_t tier = program.buffers()[b].tier;
            const std::int64_t begin = plan.offsets[b], end = begin + program.buffers()[b].bytes;
            for (const auto& [other, range] : held) {
              if (program.buffers()[other].tier != tier) continue;
              ASSERT_FALSE(range.first < end && begin < range.second)
                  << "trial " << trial << ": buffers " << id << " and " << program.buffers()[other].id << " overlap";
            }
            ASSERT_GE(begin, plan.resident_bytes[tier]);
            ASSERT_LE(end, plan.arena_bytes[tier]);
            held[b] = {begin, end};
          }
          running.push_back(p);
        } else {
          const std::size_t pick = random() % running.size();
          const std::size_t p = running[pick];
          running.erase(running.begin() + static_cast<std::ptrdiff_t>(pick));
          const Instruction& done = schedule.instructions()[p];
          if (done.kind == InstructionKind::Free) {
            for (std::int64_t id : done.reads) held.erase(position[id]);
          }
          ++finished;
          for (std::size_t s : schedule.successors(p)) {
            if (--waiting[s] == 0) ready.push_back(s);
          }
        }
      }
    }
  }
}

TEST(MemoryPlanTest, NoRunOrderOverlapsLiveBuffers) { expect_no_run_order_overlaps(false); }

TEST(MemoryPlanTest, NoRunOrderOverlapsLiveBuffersWithLoadsCopiesAndResidents) { expect_no_run_order_overlaps(true); }

}  // namespace
}  // namespace tt

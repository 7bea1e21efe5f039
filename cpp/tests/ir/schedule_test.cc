// Tests of Schedule: indexing of a valid DAG and rejection of malformed ones.
#include "tt/ir/schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tt/common/error.h"

namespace tt {
namespace {

using Positions = std::vector<std::size_t>;

Instruction make(std::int64_t id, std::vector<std::int64_t> deps = {}) {
  Instruction instruction;
  instruction.id = id;
  instruction.label = "op" + std::to_string(id);
  instruction.deps = std::move(deps);
  return instruction;
}

// Builds a schedule that must be rejected and returns the message, checking the code.
std::string rejection(std::vector<Instruction> instructions) {
  try {
    Schedule schedule(std::move(instructions));
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    return error.what();
  }
  ADD_FAILURE() << "schedule was accepted";
  return "";
}

TEST(ScheduleTest, IndexesValidDag) {
  // Positions: 0 = id 30 (needs 10), 1 = id 10, 2 = id 20, 3 = id 40 (needs 10 and 20).
  Schedule schedule({make(30, {10}), make(10), make(20), make(40, {20, 10})});

  ASSERT_EQ(schedule.size(), 4u);
  EXPECT_EQ(schedule.instructions()[0].id, 30);
  EXPECT_EQ(schedule.successors(0), Positions{});
  EXPECT_EQ(schedule.successors(1), (Positions{0, 3}));
  EXPECT_EQ(schedule.successors(2), Positions{3});
  EXPECT_EQ(schedule.successors(3), Positions{});
  EXPECT_EQ(schedule.dependency_count(0), 1u);
  EXPECT_EQ(schedule.dependency_count(1), 0u);
  EXPECT_EQ(schedule.dependency_count(3), 2u);
  EXPECT_EQ(schedule.roots(), (Positions{1, 2}));
  // Ready {1, 2}: 1 first, which readies 0, the lowest ready position; then 2, then 3.
  EXPECT_EQ(schedule.topological_order(), (Positions{1, 0, 2, 3}));
}

TEST(ScheduleTest, TopologicalOrderIsDeterministic) {
  const std::vector<Instruction> instructions = {make(5), make(4), make(3, {5, 4}), make(2), make(1, {2, 3})};
  const Schedule first(instructions);
  const Schedule second(instructions);
  EXPECT_EQ(first.topological_order(), (Positions{0, 1, 2, 3, 4}));
  EXPECT_EQ(first.topological_order(), second.topological_order());
}

TEST(ScheduleTest, EmptyScheduleIsValid) {
  Schedule schedule({});
  EXPECT_EQ(schedule.size(), 0u);
  EXPECT_TRUE(schedule.roots().empty());
  EXPECT_TRUE(schedule.topological_order().empty());
}

TEST(ScheduleTest, RejectsDuplicateIds) {
  EXPECT_EQ(rejection({make(1), make(7), make(7, {1})}), "schedule: duplicate instruction id 7");
}

TEST(ScheduleTest, RejectsUnknownDependency) {
  EXPECT_EQ(rejection({make(1), make(7, {1, 9})}), "schedule: instruction 7 depends on unknown instruction 9");
}

TEST(ScheduleTest, RejectsSelfDependency) {
  EXPECT_EQ(rejection({make(3, {3})}), "schedule: instruction 3 depends on itself");
}

TEST(ScheduleTest, RejectsDuplicateDependency) {
  EXPECT_EQ(rejection({make(1), make(2, {1, 1})}), "schedule: instruction 2 depends on instruction 1 twice");
}

TEST(ScheduleTest, RejectsTwoCycle) {
  EXPECT_EQ(rejection({make(1, {2}), make(2, {1})}), "schedule: dependency cycle 1 -> 2 -> 1");
}

TEST(ScheduleTest, RejectsThreeCycleBehindValidPrefix) {
  // 0 is fine; 1 -> 2 -> 3 -> 1 is the cycle (3 needs 2, 2 needs 1, 1 needs 3); 4 only
  // hangs off the cycle and must not be named.
  const std::string message =
      rejection({make(0), make(1, {0, 3}), make(2, {1}), make(3, {2}), make(4, {3})});
  EXPECT_EQ(message, "schedule: dependency cycle 1 -> 2 -> 3 -> 1");
}

}  // namespace
}  // namespace tt

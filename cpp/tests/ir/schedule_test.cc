// Tests of Schedule: indexing of a valid DAG and rejection of malformed ones.
#include "tt/ir/schedule.h"

#include <gtest/gtest.h>

#include <limits>
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

Instruction predicted(std::int64_t id, double start_us, double end_us) {
  Instruction instruction = make(id);
  instruction.predicted_start_us = start_us;
  instruction.predicted_end_us = end_us;
  return instruction;
}

TEST(ScheduleTest, AcceptsPredictionsAndTheirAbsence) {
  Instruction load = predicted(2, 1.0, 1.0);  // zero length is a prediction too
  load.kind = InstructionKind::Load;
  const Schedule schedule({predicted(1, 0.0, 2.5), load, make(3), predicted(4, -3.0, -7.0)});
  EXPECT_EQ(schedule.instructions()[0].predicted_end_us, 2.5);
  EXPECT_EQ(schedule.instructions()[1].kind, InstructionKind::Load);
  EXPECT_EQ(schedule.instructions()[2].predicted_start_us, -1.0);  // none by default
  EXPECT_STREQ(instruction_kind_name(InstructionKind::Load), "load");
  EXPECT_EQ(static_cast<std::int32_t>(InstructionKind::Load), 2);  // numbers stay stable (instruction.h)
}

TEST(ScheduleTest, RejectsMalformedPredictions) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(rejection({make(1), predicted(5, nan, 1.0)}),
            "schedule: instruction 5 predicted_start_us and predicted_end_us must be finite, got start nan and end 1");
  EXPECT_NE(rejection({predicted(6, 0.0, inf)}).find("instruction 6 predicted_start_us and predicted_end_us must be "
                                                     "finite"),
            std::string::npos);
  EXPECT_NE(rejection({predicted(7, -1.0, inf)}).find("instruction 7"), std::string::npos);
  EXPECT_EQ(rejection({predicted(8, 2.0, -1.0)}),
            "schedule: instruction 8 predicted_start_us and predicted_end_us must both be >= 0 or both negative "
            "(no prediction), got start 2 and end -1");
  EXPECT_NE(rejection({predicted(9, -1.0, 2.0)}).find("instruction 9 predicted_start_us and predicted_end_us must "
                                                      "both be >= 0"),
            std::string::npos);
  EXPECT_EQ(rejection({predicted(10, 3.0, 2.5)}),
            "schedule: instruction 10 predicted_end_us must not be before predicted_start_us, got start 3 and end 2.5");
}

}  // namespace
}  // namespace tt

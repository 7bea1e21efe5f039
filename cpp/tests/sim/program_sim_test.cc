// Tests of simulate_program: queues with capacities, prefetch overlap, the memory model, and bad costs, by hand.
#include "tt/sim/program_sim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "../ir/program_builder.h"

namespace tt {
namespace {

using test::ProgramBuilder;
constexpr std::int32_t kRam = 0, kDisk = 2, kIo = 1;

// Durations by position; positions equal instruction ids in ProgramBuilder programs.
ProgramCosts costs(std::vector<double> seconds) { return ProgramCosts{std::move(seconds), {}, {}, {}}; }

std::string rejection(const Program& program, const ProgramCosts& costs) {
  try {
    simulate_program(program, costs);
  } catch (const Error& error) {
    if (error.code() != ErrorCode::InvalidArgument) return std::string("wrong code: ") + error.what();
    return error.what();
  }
  return "accepted";
}

// weights.bin[offset, offset + bytes) -Load-> a new RAM transient; returns the load's id and the buffer.
std::pair<std::int64_t, std::int64_t> load(ProgramBuilder& b, std::int64_t bytes, std::int64_t offset,
                                           std::vector<std::int64_t> deps = {}) {
  const auto range = b.buffer(bytes, kDisk, BufferLifetime::Resident, 0, offset);
  const auto buffer = b.buffer(bytes, kRam);
  return {b.add(InstructionKind::Load, kIo, {range}, {buffer}, std::move(deps)), buffer};
}

TEST(ProgramSimTest, AChainTakesTheSumOfItsDurations) {
  ProgramBuilder b;
  test::add_chain_of_three(b, 64);
  const Program program(b.spec);
  const ProgramSimResult r = simulate_program(program, costs({1, 2, 0, 3, 0}));
  EXPECT_EQ(r.makespan_s, 6.0);
  EXPECT_EQ(r.start_s, (std::vector<double>{0, 1, 3, 3, 6}));
  EXPECT_EQ(r.end_s, (std::vector<double>{1, 3, 3, 6, 6}));
  EXPECT_EQ(r.critical_path, (std::vector<std::int64_t>{0, 1, 3}));
  EXPECT_EQ(r.busy_s, (std::vector<double>{6, 0, 0}));
  // x and y, then y and z (z takes x's place once x is freed at 3).
  EXPECT_EQ(r.peak_bytes, (std::vector<std::int64_t>{128, 0, 0}));
  EXPECT_EQ(r.arena_bytes, (std::vector<std::int64_t>{128, 0, 0}));
}

TEST(ProgramSimTest, EarliestStartsReplayACallAsItRan) {
  // Two independent loads on a deep queue, then their readers: started as measured (the
  // second load late, as a busy thread would start it), the timeline and peaks follow.
  ProgramBuilder b;
  const auto [l0, w0] = load(b, 1000, 0);
  const auto [l1, w1] = load(b, 3000, 4096);
  const auto c0 = b.compute({w0}, {}, {l0});
  b.free({w0}, {c0});
  const auto c1 = b.compute({w1}, {}, {l1});
  b.free({w1}, {c1});
  const Program program(b.spec);
  ProgramCosts replay = costs({1, 1, 1, 0, 1, 0});
  replay.earliest_start_s = {0, 2.5, 0, 0, 0, 0};
  const ProgramSimResult r = simulate_program(program, replay);
  EXPECT_EQ(r.start_s, (std::vector<double>{0, 2.5, 1, 2, 3.5, 4.5}));
  EXPECT_EQ(r.makespan_s, 4.5);
  EXPECT_EQ(r.peak_bytes[kRam], 3000);  // w0 was freed at 2, before w1's load began
  // Without them the loads overlap, and so do their buffers.
  EXPECT_EQ(simulate_program(program, costs({1, 1, 1, 0, 1, 0})).peak_bytes[kRam], 4000);
  replay.earliest_start_s = {0, -1, 0, 0, 0, 0};
  EXPECT_CONTAINS(rejection(program, replay), "has earliest start -1, expected a finite number >= 0");
  replay.earliest_start_s = {0};
  EXPECT_CONTAINS(rejection(program, replay), "costs.earliest_start_s has 1 entries");
}

ProgramSimResult two_loads(std::int32_t io_depth) {
  ProgramBuilder b;
  b.spec.queues[kIo].capacity = io_depth;
  const auto [l0, w0] = load(b, 1000, 0);
  const auto [l1, w1] = load(b, 3000, 4096);
  b.spec.outputs = {w0, w1};
  return simulate_program(Program(b.spec), costs({2, 3}));
}

TEST(ProgramSimTest, AnIoQueueOfDepthOneLoadsInTurnAndOfDepthTwoAtOnce) {
  const ProgramSimResult serial = two_loads(1);
  EXPECT_EQ(serial.start_s, (std::vector<double>{0, 2}));
  EXPECT_EQ(serial.makespan_s, 5.0);
  EXPECT_EQ(serial.critical_path, (std::vector<std::int64_t>{0, 1}));  // l1 waited for the queue, not for data
  const ProgramSimResult overlapped = two_loads(2);
  EXPECT_EQ(overlapped.start_s, (std::vector<double>{0, 0}));
  EXPECT_EQ(overlapped.makespan_s, 3.0);
  EXPECT_EQ(overlapped.critical_path, (std::vector<std::int64_t>{1}));
  for (const auto& r : {serial, overlapped}) {
    EXPECT_EQ(r.bytes_moved, (std::vector<std::int64_t>{0, 4000, 0}));
    EXPECT_EQ(r.busy_s, (std::vector<double>{0, 5, 0}));
    EXPECT_EQ(r.peak_bytes[kRam], 4000);
  }
}

TEST(ProgramSimTest, LoadDurationsDeriveFromTheQueueBandwidth) {
  ProgramBuilder b;
  const auto [l0, w0] = load(b, 1000, 0);
  b.spec.outputs = {w0};
  const Program program(b.spec);
  const ProgramSimResult r = simulate_program(program, {{-1.0}, {0, 500, 0}, {0, 0.5, 0}, {}});
  EXPECT_EQ(r.end_s, (std::vector<double>{2.5}));  // 0.5 s latency + 1000 B / 500 B/s
  EXPECT_EQ(transfer_seconds(1000, 500, 0.5), 2.5);
}

TEST(ProgramSimTest, ACpuQueueOfTwoSlotsRunsTwoComputesThenTheThird) {
  ProgramBuilder b;
  for (int i = 0; i < 3; ++i) b.spec.outputs.push_back(b.buffer(64));
  for (int i = 0; i < 3; ++i) b.compute({}, {b.spec.outputs[i]});
  const ProgramSimResult r = simulate_program(Program(b.spec), costs({1, 1, 1}));
  EXPECT_EQ(r.start_s, (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(r.makespan_s, 2.0);
  EXPECT_EQ(r.busy_s[0], 3.0);
  EXPECT_EQ(r.peak_bytes[kRam], 192);
}

// Three layers; the load of layer k + 1 is listed before the compute of layer k, so it
// runs while layer k computes. Weights are 4096 bytes, activations 256; x is the input.
// Positions: l0 l1 c0 fw0 l2 c1 fw1 fh0 c2 fw2 fh1.
ProgramSimResult prefetch(double load_s, double compute_s) {
  ProgramBuilder b;
  b.spec.queues[kIo].capacity = 1;
  const auto x = b.buffer(256, kRam, BufferLifetime::Input);
  const auto [l0, w0] = load(b, 4096, 0);
  const auto [l1, w1] = load(b, 4096, 4096);
  const auto h0 = b.buffer(256), h1 = b.buffer(256), h2 = b.buffer(256);
  const auto c0 = b.compute({x, w0}, {h0}, {l0});
  b.free({w0}, {c0});
  const auto [l2, w2] = load(b, 4096, 8192);
  const auto c1 = b.compute({h0, w1}, {h1}, {c0, l1});
  b.free({w1}, {c1});
  b.free({h0}, {c1});
  const auto c2 = b.compute({h1, w2}, {h2}, {c1, l2});
  b.free({w2}, {c2});
  b.free({h1}, {c2});
  b.spec.outputs = {h2};
  const double L = load_s, C = compute_s;
  return simulate_program(Program(b.spec), costs({L, L, C, 0, L, C, 0, 0, C, 0, 0}));
}

TEST(ProgramSimTest, PrefetchOverlapsTheNextLoadWithThisCompute) {
  // Two stages, three items: L + C + 2 max(L, C), against 3 (L + C) without overlap.
  const ProgramSimResult compute_bound = prefetch(2, 3);
  EXPECT_EQ(compute_bound.makespan_s, 2 + 3 + 2 * 3);
  EXPECT_EQ(compute_bound.start_s[1], 2.0);   // l1 right after l0, during c0 [2, 5)
  EXPECT_EQ(compute_bound.start_s[4], 5.0);   // l2 reuses w0's bytes, so it waits for w0's free at 5
  EXPECT_EQ(compute_bound.start_s[8], 8.0);
  EXPECT_EQ(compute_bound.critical_path, (std::vector<std::int64_t>{0, 2, 5, 8}));
  const ProgramSimResult load_bound = prefetch(3, 1);
  EXPECT_EQ(load_bound.makespan_s, 3 + 1 + 2 * 3);
  EXPECT_EQ(load_bound.critical_path, (std::vector<std::int64_t>{0, 1, 4, 8}));
  for (const auto& r : {compute_bound, load_bound}) {
    EXPECT_EQ(r.arena_bytes[kRam], 2 * 4096 + 2 * 256);  // h2 takes h0's place
    EXPECT_LE(r.peak_bytes[kRam], r.arena_bytes[kRam]);
  }
}

TEST(ProgramSimTest, AStreamedChainPeaksAtOneWeightAndTwoActivationsPlusTheResidents) {
  // Positions: l0 c0 fw0 l1 c1 fw1 fh0 l2 c2 fw2 fh1; each load reuses the previous
  // weight's bytes, so the memory plan serializes the loads behind the frees.
  ProgramBuilder b;
  const auto norm = b.buffer(128, kRam, BufferLifetime::Resident);
  const auto x = b.buffer(256, kRam, BufferLifetime::Input);
  std::int64_t previous = x, previous_compute = -1, previous_free = -1;
  for (int k = 0; k < 3; ++k) {
    const auto [l, w] = load(b, 4096, 4096 * k);
    const auto h = b.buffer(256);
    std::vector<std::int64_t> deps = {l};
    if (previous_compute >= 0) deps.push_back(previous_compute);
    const auto c = b.compute({previous, w, norm}, {h}, deps);
    b.free({w}, {c});
    if (previous != x) previous_free = b.free({previous}, {c});
    previous = h;
    previous_compute = c;
  }
  (void)previous_free;
  b.spec.outputs = {previous};
  const Program program(b.spec);
  const ProgramSimResult r = simulate_program(program, costs({1, 2, 0, 1, 2, 0, 0, 1, 2, 0, 0}));
  EXPECT_EQ(r.start_s, (std::vector<double>{0, 1, 3, 3, 4, 6, 6, 6, 7, 9, 9}));
  EXPECT_EQ(r.makespan_s, 9.0);
  // Live: w0 [0, 3), h0 [1, 6), w1 [3, 6), h1 [4, 9), w2 [6, 9), h2 [7, end). Highest at
  // 4 (h0 w1 h1) and at 7 (h1 w2 h2): 4096 + 2 * 256, over the 128 resident bytes. Had
  // allocations come before frees at 3 and 6, two weights would count at once.
  EXPECT_EQ(r.peak_bytes, (std::vector<std::int64_t>{128 + 4096 + 512, 0, 0}));
  EXPECT_EQ(r.arena_bytes, (std::vector<std::int64_t>{128 + 4096 + 512, 0, 0}));
  EXPECT_EQ(r.bytes_moved[kIo], 3 * 4096);
}

TEST(ProgramSimTest, AtEqualTimesFreesComeBeforeAllocations) {
  ProgramBuilder b;
  const auto x = b.buffer(128), y = b.buffer(64), z = b.buffer(512);
  const auto c0 = b.compute({}, {x});
  const auto f1 = b.free({x}, {c0});
  const auto c2 = b.compute({}, {y}, {f1});  // starts at 1, when x's free ends
  const auto c3 = b.compute({}, {z}, {c2});  // z lives for no time at all: counted alone, for an instant
  b.free({z}, {c3});
  b.spec.outputs = {y};
  const ProgramSimResult r = simulate_program(Program(b.spec), costs({1, 0, 1, 0, 0}));
  EXPECT_EQ(r.start_s, (std::vector<double>{0, 1, 1, 2, 2}));
  EXPECT_EQ(r.peak_bytes[kRam], 64 + 512);
  EXPECT_EQ(r.arena_bytes[kRam], 512 + 64);
}

TEST(ProgramSimTest, TheCriticalPathOfADiamondTakesTheLongerBranch) {
  ProgramBuilder b;
  const auto a = b.buffer(64), l = b.buffer(64), r = b.buffer(64), out = b.buffer(64);
  const auto c0 = b.compute({}, {a});
  const auto c1 = b.compute({a}, {l}, {c0});
  const auto c2 = b.compute({a}, {r}, {c0});
  b.free({a}, {c1, c2});
  const auto c4 = b.compute({l, r}, {out}, {c1, c2});
  b.free({l, r}, {c4});
  b.spec.outputs = {out};
  const ProgramSimResult result = simulate_program(Program(b.spec), costs({1, 2, 5, 0, 1, 0}));
  EXPECT_EQ(result.start_s, (std::vector<double>{0, 1, 1, 6, 6, 7}));
  EXPECT_EQ(result.makespan_s, 7.0);
  EXPECT_EQ(result.critical_path, (std::vector<std::int64_t>{0, 2, 4}));  // c4 and the free end at 7: the lower
}

// Random programs with loads, copies, residents and random durations (zeros included) on
// queues of random capacity: the simulated peak never exceeds the arena, no queue runs
// more than its capacity, and no instruction starts before its dependencies end.
TEST(ProgramSimTest, ThePeakNeverExceedsTheArenaOverRandomPrograms) {
  std::mt19937 random(11);
  int tight = 0;  // trials whose run reached the arena on some tier: the bound is not vacuous
  for (int trial = 0; trial < 100; ++trial) {
    ProgramSpec spec = test::random_program(random, /*movement=*/true);
    for (Queue& queue : spec.queues) queue.capacity = 1 + static_cast<std::int32_t>(random() % 3);
    const Program program(std::move(spec));
    const Schedule& schedule = *program.schedule();
    ProgramCosts trial_costs;
    for (std::size_t p = 0; p < schedule.size(); ++p) trial_costs.seconds.push_back(static_cast<double>(random() % 4));
    const ProgramSimResult r = simulate_program(program, trial_costs);
    for (std::size_t t = 0; t < program.tiers().size(); ++t) {
      ASSERT_LE(r.peak_bytes[t], r.arena_bytes[t]) << "trial " << trial << ", tier " << t;
      if (r.arena_bytes[t] > 0 && r.peak_bytes[t] == r.arena_bytes[t]) ++tight;
    }
    for (std::size_t p = 0; p < schedule.size(); ++p) {
      for (std::size_t s : schedule.successors(p)) ASSERT_LE(r.end_s[p], r.start_s[s]) << "trial " << trial;
      // On p's queue at p's start, p included; what takes no time holds a slot for no time.
      std::int32_t running = 0;
      for (std::size_t q = 0; q < schedule.size() && r.end_s[p] > r.start_s[p]; ++q) {
        const bool same_queue = schedule.instructions()[q].queue == schedule.instructions()[p].queue;
        if (same_queue && r.start_s[q] <= r.start_s[p] && r.start_s[p] < r.end_s[q]) ++running;
      }
      ASSERT_LE(running, program.queues()[schedule.instructions()[p].queue].capacity) << "trial " << trial;
    }
  }
  EXPECT_GT(tight, 10);
}

TEST(ProgramSimTest, TheSameInputGivesTheSameResult) {
  std::mt19937 random(3);
  const Program program(test::random_program(random, /*movement=*/true));
  ProgramCosts c;
  for (std::size_t p = 0; p < program.schedule()->size(); ++p) c.seconds.push_back(static_cast<double>(p % 3));
  const ProgramSimResult a = simulate_program(program, c), b = simulate_program(program, c);
  EXPECT_EQ(a.start_s, b.start_s);
  EXPECT_EQ(a.end_s, b.end_s);
  EXPECT_EQ(a.peak_bytes, b.peak_bytes);
  EXPECT_EQ(a.critical_path, b.critical_path);
}

TEST(ProgramSimTest, BadCostsAreRejectedNamingTheInstructionOrQueue) {
  ProgramBuilder b;
  const auto [l0, w] = load(b, 1000, 0);
  const auto y = b.buffer(64);
  b.compute({w}, {y}, {l0});
  b.free({w}, {1});
  b.spec.outputs = {y};
  const Program program(b.spec);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_CONTAINS(rejection(program, costs({1, 1})), "costs.seconds has 2 entries, expected one per instruction (3)");
  EXPECT_CONTAINS(rejection(program, costs({1, nan, 0})), "compute 1 ('compute1') has seconds nan, expected a finite");
  EXPECT_CONTAINS(rejection(program, costs({1, INFINITY, 0})), "compute 1 ('compute1') has seconds inf");
  EXPECT_CONTAINS(rejection(program, costs({1, -1, 0})), "compute 1 ('compute1') has seconds -1: a negative");
  EXPECT_CONTAINS(rejection(program, costs({-1, 1, 0})), "load 0 ('load0') has seconds -1");
  EXPECT_CONTAINS(rejection(program, {{-1, 1, 0}, {1e9, 0, 1e9}, {}, {}}),
                  "on a queue with a known bandwidth (queue 'io')");
  EXPECT_CONTAINS(rejection(program, {{1, 1, 0}, {1.0}, {}, {}}), "queue_bytes_per_s has 1 entries, expected 0 or one per");
  EXPECT_CONTAINS(rejection(program, {{1, 1, 0}, {}, {0, -1, 0}, {}}), "queue_latency_s of queue 'io' is -1");
  EXPECT_THROW(transfer_seconds(-1, 1.0, 0.0), Error);
  EXPECT_THROW(transfer_seconds(1, 0.0, 0.0), Error);
  EXPECT_THROW(transfer_seconds(1, 1.0, nan), Error);
}

}  // namespace
}  // namespace tt

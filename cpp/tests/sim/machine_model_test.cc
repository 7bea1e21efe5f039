// Tests of MachineModel: validation of the description and the cost formulas.
#include "tt/sim/machine_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim_test_support.h"

namespace tt {
namespace {

using namespace tt::test;

std::string rejection(std::vector<TierModel> tiers, std::vector<DeviceModel> devices, std::vector<LinkModel> links) {
  try {
    MachineModel machine(std::move(tiers), std::move(devices), std::move(links));
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    return error.what();
  }
  ADD_FAILURE() << "machine was accepted";
  return "";
}

const std::vector<TierModel> kTiers = {{"cuda:0", 1000}, {"ram", 5000}};
const DeviceModel kGpu = {"cuda:0", 100.0, 50.0, 0};
const LinkModel kLink = {"h2d", 1, 0, 100.0, 0.5};

TEST(MachineModelTest, KeepsTheDescription) {
  const MachineModel machine = test_machine();
  ASSERT_EQ(machine.tiers().size(), 4u);
  EXPECT_EQ(machine.tiers()[kRamTier].name, "ram");
  EXPECT_EQ(machine.devices()[kCpu].memory_tier, kRamTier);
  EXPECT_EQ(machine.links()[kDiskToRam].from_tier, kDiskTier);
}

TEST(MachineModelTest, ComputeSecondsIsARoofline) {
  const MachineModel machine = test_machine();
  EXPECT_EQ(machine.compute_seconds(kGpu0, 200.0, 50.0), 2.0);   // compute-bound: 200 / 100
  EXPECT_EQ(machine.compute_seconds(kGpu0, 100.0, 150.0), 3.0);  // memory-bound: 150 / 50
  EXPECT_EQ(machine.compute_seconds(kCpu, 0.0, 0.0), 0.0);
}

TEST(MachineModelTest, TransferSecondsIsLatencyPlusBytesOverBandwidth) {
  const MachineModel machine = test_machine();
  EXPECT_EQ(machine.transfer_seconds(kRamToGpu0, 300), 3.5);
  EXPECT_EQ(machine.transfer_seconds(kRamToGpu0, 0), 0.5);
  EXPECT_EQ(machine.transfer_seconds(kDiskToRam, 100), 2.0);
}

TEST(MachineModelTest, FindsLinksByTiers) {
  const MachineModel machine = test_machine();
  EXPECT_EQ(machine.find_link(kRamTier, kGpu1Tier), kRamToGpu1);
  EXPECT_EQ(machine.find_link(kGpu1Tier, kRamTier), std::nullopt);  // links are one-way
  EXPECT_EQ(machine.find_link(kDiskTier, kGpu0Tier), std::nullopt);  // staged through RAM: two links
  EXPECT_EQ(machine.find_link(-1, 99), std::nullopt);
}

TEST(MachineModelTest, CostFormulasRejectBadArguments) {
  const MachineModel machine = test_machine();
  EXPECT_THROW(machine.compute_seconds(3, 1.0, 1.0), Error);
  EXPECT_THROW(machine.compute_seconds(kGpu0, -1.0, 1.0), Error);
  EXPECT_THROW(machine.transfer_seconds(3, 1), Error);
  EXPECT_THROW(machine.transfer_seconds(kRamToGpu0, -1), Error);
}

TEST(MachineModelTest, AllowsNoLinks) {
  const MachineModel machine(kTiers, {kGpu}, {});
  EXPECT_TRUE(machine.links().empty());
}

TEST(MachineModelTest, RejectsMissingDevices) {
  EXPECT_EQ(rejection(kTiers, {}, {}), "machine model: needs at least one device, found none");
}

TEST(MachineModelTest, RejectsEmptyOrRepeatedNames) {
  EXPECT_EQ(rejection({{"ram", 1}, {"ram", 2}}, {{"cpu", 1.0, 1.0, 0}}, {}), "machine model: duplicate tier name 'ram'");
  EXPECT_EQ(rejection(kTiers, {kGpu, kGpu}, {}), "machine model: duplicate device name 'cuda:0'");
  EXPECT_EQ(rejection(kTiers, {{"", 1.0, 1.0, 0}}, {}), "machine model: device 0 has an empty name");
  // A device and its memory tier may share a name.
  EXPECT_NO_THROW(MachineModel(kTiers, {kGpu}, {kLink}));
}

TEST(MachineModelTest, RejectsNonPositiveSpeeds) {
  EXPECT_EQ(rejection(kTiers, {{"cuda:0", 0.0, 50.0, 0}}, {}),
            "machine model: device 'cuda:0' flops_per_s must be a positive finite number, found 0");
  EXPECT_EQ(rejection(kTiers, {{"cuda:0", 1.0, -5.0, 0}}, {}),
            "machine model: device 'cuda:0' memory_bytes_per_s must be a positive finite number, found -5");
  EXPECT_EQ(rejection(kTiers, {kGpu}, {{"h2d", 1, 0, 0.0, 0.0}}),
            "machine model: link 'h2d' bytes_per_s must be a positive finite number, found 0");
}

TEST(MachineModelTest, RejectsNegativeLatencyAndCapacity) {
  EXPECT_EQ(rejection(kTiers, {kGpu}, {{"h2d", 1, 0, 1.0, -0.25}}),
            "machine model: link 'h2d' latency_s must be a finite number >= 0, found -0.25");
  EXPECT_EQ(rejection({{"ram", -1}}, {{"cpu", 1.0, 1.0, 0}}, {}),
            "machine model: tier 'ram' capacity_bytes must be >= 0, found -1");
}

TEST(MachineModelTest, RejectsTierIndicesOutOfRange) {
  EXPECT_EQ(rejection(kTiers, {{"cuda:0", 1.0, 1.0, 2}}, {}),
            "machine model: device 'cuda:0' memory_tier must be a tier index in [0, 2), found 2");
  EXPECT_EQ(rejection(kTiers, {kGpu}, {{"h2d", -1, 0, 1.0, 0.0}}),
            "machine model: link 'h2d' from_tier must be a tier index in [0, 2), found -1");
  EXPECT_EQ(rejection(kTiers, {kGpu}, {{"h2d", 1, 5, 1.0, 0.0}}),
            "machine model: link 'h2d' to_tier must be a tier index in [0, 2), found 5");
}

TEST(MachineModelTest, RejectsLinkFromATierToItself) {
  EXPECT_EQ(rejection(kTiers, {kGpu}, {{"loop", 1, 1, 1.0, 0.0}}),
            "machine model: link 'loop' must join two different tiers, found from_tier = to_tier = 1");
}

}  // namespace
}  // namespace tt

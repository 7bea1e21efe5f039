// Tests of bound memory in the data plane: copies read inputs and torch-owned buffers at the
// addresses bound to them, each binding rule rejects what it must, and empty pairs need none.
#include "tt/runtime/data_plane.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <numeric>

#include "../ir/program_builder.h"
#include "tt/common/error.h"

namespace tt {
namespace {

using test::ProgramBuilder;

std::vector<std::byte> pattern(std::size_t size, int first) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(first + static_cast<int>(i));
  return bytes;
}

// An input x, a torch-owned transient t a compute writes, a torch-owned resident r, each
// copied to the device: buffers 100..105 are x, t, r, then the copies of x, t and r.
// Buffers 106 (held by the core) and 107 (a file range) are never bound.
struct BoundCopies {
  ProgramBuilder builder;
  std::int64_t x, t, r, x_copy, t_copy, r_copy, held, range;

  BoundCopies() {
    builder.host_second_tier();
    x = builder.buffer(64, 0, BufferLifetime::Input);
    t = builder.buffer(64);
    r = builder.buffer(64, 0, BufferLifetime::Resident);
    x_copy = builder.buffer(64, 1);
    t_copy = builder.buffer(64, 1);
    r_copy = builder.buffer(64, 1);
    held = builder.buffer(64, 0, BufferLifetime::Resident);
    range = builder.buffer(64, 2, BufferLifetime::Resident, 0, 0);
    builder.spec.buffers[1].torch_owned = true;
    builder.spec.buffers[2].torch_owned = true;
    const auto produce = builder.compute({}, {t});
    builder.add(InstructionKind::Copy, 2, {x}, {x_copy});
    const auto copy_t = builder.add(InstructionKind::Copy, 2, {t}, {t_copy}, {produce});
    builder.add(InstructionKind::Copy, 2, {r}, {r_copy});
    builder.free({t}, {copy_t});
    builder.spec.outputs = {x_copy, t_copy, r_copy};
  }
};

// Runs `bind` and returns its InvalidArgument message ("no error" or the wrong code otherwise).
std::string bind_error(const std::function<void()>& bind) {
  try {
    bind();
  } catch (const Error& error) {
    return error.code() == ErrorCode::InvalidArgument ? error.what() : std::string("wrong code: ") + error.what();
  }
  return "no error";
}

TEST(DataPlaneBindTest, CopiesReadTheAddressesBoundToInputsAndTorchOwnedBuffers) {
  BoundCopies b;
  auto program = std::make_shared<const Program>(b.builder.spec);
  DataPlane plane(program, nullptr, 2);
  auto input = pattern(64, 1), produced = pattern(64, 100), resident = pattern(64, 200);
  plane.bind_resident(b.r, resident.data(), 64);
  EXPECT_EQ(plane.resident_memory()->address(program->buffer_position(b.r)), resident.data());
  auto memory = plane.begin_call(1.0);
  memory->bind(b.x, input.data(), 64);
  plane.run(memory, [&](const Instruction&) { memory->bind(b.t, produced.data(), 64); }, {});
  auto copied = [&](std::int64_t id, const std::vector<std::byte>& expected) {
    return std::memcmp(memory->address(program->buffer_position(id)), expected.data(), 64) == 0;
  };
  EXPECT_TRUE(copied(b.x_copy, input));
  EXPECT_TRUE(copied(b.t_copy, produced));
  EXPECT_TRUE(copied(b.r_copy, resident));
  plane.end_call(memory);
}

TEST(DataPlaneBindTest, EachBindingRuleRejectsWhatItMust) {
  BoundCopies b;
  auto program = std::make_shared<const Program>(b.builder.spec);
  DataPlane plane(program, nullptr, 1);
  auto memory = plane.begin_call(1.0);
  std::vector<std::byte> bytes(64);
  std::byte* at = bytes.data();
  EXPECT_CONTAINS(bind_error([&] { memory->bind(999, at, 64); }), "the program has no buffer 999");
  EXPECT_CONTAINS(bind_error([&] { memory->bind(b.held, at, 64); }),
                  "buffer 106 ('b106') is held by the core; only inputs and torch-owned buffers are bound");
  EXPECT_CONTAINS(bind_error([&] { memory->bind(b.range, at, 64); }), "buffer 107 ('b107') is a file range");
  EXPECT_CONTAINS(bind_error([&] { memory->bind(b.x, at, 32); }),
                  "buffer 100 ('b100') holds 64 bytes, but 32 were bound");
  EXPECT_CONTAINS(bind_error([&] { memory->bind(b.x, nullptr, 64); }), "buffer 100 ('b100'): the address is null");
  EXPECT_CONTAINS(bind_error([&] { plane.bind_resident(b.x, at, 64); }),
                  "buffer 100 ('b100') is an input, not resident: bind it per call");
  EXPECT_CONTAINS(bind_error([&] { plane.bind_resident(b.t, at, 64); }), "buffer 101 ('b101') is transient");
  EXPECT_CONTAINS(bind_error([&] { plane.bind_resident(b.held, at, 64); }), "buffer 106 ('b106') is held by the core");
  EXPECT_CONTAINS(bind_error([&] { plane.bind_resident(b.r, at, 63); }), "holds 64 bytes, but 63 were bound");
  // Unbound, the input fails the run when its copy needs its address.
  EXPECT_CONTAINS(bind_error([&] { plane.run(memory, [](const Instruction&) {}, {}); }),
                  "buffer 100 ('b100') is not bound");
  plane.end_call(memory);
}

TEST(DataPlaneBindTest, AnEmptyCopyPairNeedsNoAddress) {
  ProgramBuilder b;
  b.host_second_tier();
  const auto value = b.buffer(0, 0, BufferLifetime::Input);  // a value Python carries itself
  const auto x = b.buffer(64, 0, BufferLifetime::Input);
  const auto value_copy = b.buffer(0, 1), x_copy = b.buffer(64, 1);
  b.add(InstructionKind::Copy, 2, {value, x}, {value_copy, x_copy});
  b.spec.outputs = {value_copy, x_copy};
  auto program = std::make_shared<const Program>(b.spec);
  DataPlane plane(program, nullptr, 1);
  auto memory = plane.begin_call(1.0);
  auto input = pattern(64, 7);
  memory->bind(x, input.data(), 64);
  plane.run(memory, [](const Instruction&) {}, {});
  EXPECT_EQ(std::memcmp(memory->address(program->buffer_position(x_copy)), input.data(), 64), 0);
  plane.end_call(memory);
}

}  // namespace
}  // namespace tt

// The data plane: a program's arenas, its ledger admission, and the native side of every instruction.
#include "tt/runtime/data_plane.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "tt/common/error.h"

namespace tt {
namespace {

bool held_by_core(const Buffer& buffer) {
  return !buffer.torch_owned && buffer.lifetime != BufferLifetime::Input && buffer.file < 0;
}

// Inputs and torch-owned buffers: bytes in memory the core does not allocate, so their
// addresses are bound, per call or (residents) per plane.
bool bound_externally(const Buffer& buffer) { return !held_by_core(buffer) && buffer.file < 0; }

std::string buffer_name(const Buffer& buffer) {
  return "buffer " + std::to_string(buffer.id) + " ('" + buffer.label + "')";
}

// The position of buffer `id`, checked to be one that `bytes` at `address` may stand for;
// Error(InvalidArgument) naming it otherwise.
std::size_t bindable(const Program& program, std::int64_t id, const std::byte* address, std::int64_t bytes,
                     const std::string& caller) {
  std::size_t position = 0;
  try {
    position = program.buffer_position(id);
  } catch (const Error&) {
    throw Error(ErrorCode::InvalidArgument, caller + ": the program has no buffer " + std::to_string(id));
  }
  const Buffer& buffer = program.buffers()[position];
  const std::string who = caller + ": " + buffer_name(buffer);
  if (buffer.file >= 0) throw Error(ErrorCode::InvalidArgument, who + " is a file range; loads read it in place");
  if (!bound_externally(buffer)) {
    throw Error(ErrorCode::InvalidArgument,
                who + " is held by the core; only inputs and torch-owned buffers are bound");
  }
  if (bytes != buffer.bytes) {
    throw Error(ErrorCode::InvalidArgument, who + " holds " + std::to_string(buffer.bytes) + " bytes, but " +
                                                std::to_string(bytes) + " were bound");
  }
  if (address == nullptr && bytes > 0) throw Error(ErrorCode::InvalidArgument, who + ": the address is null");
  return position;
}

// The spill files of Disk tier `tier`, whose transient arena (the memory plan's) is `bytes`,
// checked to have what spilling needs.
std::unique_ptr<SpillFilePool> spill_pool(const Tier& tier, std::int64_t bytes, const IoEngine* io,
                                          const std::string& spill_dir) {
  const std::string what = "data plane: the program spills up to " + std::to_string(bytes) +
                           " bytes per call to disk tier '" + tier.name + "'";
  if (io == nullptr) throw Error(ErrorCode::InvalidArgument, what + ", but was given no I/O engine");
  if (spill_dir.empty()) {
    throw Error(ErrorCode::InvalidArgument, what + ", but was given no spill directory (spill_dir is empty)");
  }
  auto pool = std::make_unique<SpillFilePool>(io->backend(), spill_dir);
  pool->acquire();  // one file now, back in the pool at once: a bad directory fails here, not in a call
  return pool;
}

// A Copy with a buffer on a Device tier: its bytes are the caller's to move.
bool touches_device(const Program& program, const Instruction& instruction) {
  if (instruction.kind != InstructionKind::Copy) return false;
  for (const auto* ids : {&instruction.reads, &instruction.writes}) {
    for (std::int64_t id : *ids) {
      const Buffer& buffer = program.buffers()[program.buffer_position(id)];
      if (program.tiers()[buffer.tier].kind == TierKind::Device) return true;
    }
  }
  return false;
}

}  // namespace

std::pair<std::shared_ptr<HostArena>, std::int64_t> CallMemory::locate(std::size_t position) const {
  const Buffer& buffer = program_->buffers().at(position);
  if (!held_by_core(buffer)) {
    throw Error(ErrorCode::InvalidArgument, "call memory: buffer " + std::to_string(buffer.id) + " ('" + buffer.label +
                                                "') is not held by the core (torch-owned, an input or a file range)");
  }
  if (program_->tiers()[buffer.tier].kind == TierKind::Disk) {
    throw Error(ErrorCode::InvalidArgument, "call memory: " + buffer_name(buffer) +
                                                " lives in the spill file, not in memory (spills and reloads move it)");
  }
  const std::int64_t offset = program_->memory_plan().offsets[position];
  if (buffer.lifetime == BufferLifetime::Resident) return {resident_[buffer.tier], offset};
  if (!transient_[buffer.tier]) {
    throw Error(ErrorCode::InvalidArgument, "call memory: buffer " + std::to_string(buffer.id) + " ('" + buffer.label +
                                                "') is transient; only a call's memory holds it, from begin_call until end_call");
  }
  return {transient_[buffer.tier], offset - program_->memory_plan().owned_resident_bytes[buffer.tier]};
}

std::byte* CallMemory::address(std::size_t position) const {
  const Buffer& buffer = program_->buffers().at(position);
  if (bound_externally(buffer)) {
    std::lock_guard lock(mutex_);
    if (!bound_[position]) {
      throw Error(ErrorCode::InvalidArgument, "call memory: " + buffer_name(buffer) +
                                                  " is not bound (an input or torch-owned buffer: bind its address "
                                                  "before its readers start)");
    }
    return *bound_[position];
  }
  const auto [arena, offset] = locate(position);
  return arena->data() + offset;
}

void CallMemory::bind(std::int64_t buffer_id, std::byte* address, std::int64_t bytes) {
  const std::size_t position = bindable(*program_, buffer_id, address, bytes, "call memory bind");
  std::lock_guard lock(mutex_);
  bound_[position] = address;
}

void CallMemory::take(std::size_t position) {
  const Buffer& buffer = program_->buffers()[position];
  std::lock_guard lock(mutex_);
  if (live_[position]) return;
  live_[position] = true;
  live_bytes_[buffer.tier] += buffer.bytes;
  peak_[buffer.tier] = std::max(peak_[buffer.tier], live_bytes_[buffer.tier]);
}

void CallMemory::give(std::size_t position) {
  const Buffer& buffer = program_->buffers()[position];
  std::lock_guard lock(mutex_);
  if (!live_[position]) return;
  live_[position] = false;
  live_bytes_[buffer.tier] -= buffer.bytes;
}

void CallMemory::give_all() {
  std::lock_guard lock(mutex_);
  std::fill(live_.begin(), live_.end(), false);
  std::fill(live_bytes_.begin(), live_bytes_.end(), 0);
}

std::vector<std::int64_t> CallMemory::peak_bytes() const {
  std::lock_guard lock(mutex_);
  std::vector<std::int64_t> peaks = peak_;
  for (std::size_t tier = 0; tier < peaks.size(); ++tier) peaks[tier] += program_->memory_plan().resident_bytes[tier];
  return peaks;
}

std::vector<std::pair<std::uintptr_t, std::int64_t>> CallMemory::host_arenas() const {
  std::vector<std::pair<std::uintptr_t, std::int64_t>> arenas;
  for (const auto* held : {&resident_, &transient_}) {
    for (std::size_t tier = 0; tier < held->size(); ++tier) {
      const std::shared_ptr<HostArena>& arena = (*held)[tier];
      if (arena && arena->size() > 0 && program_->tiers()[tier].kind == TierKind::Host) {
        arenas.emplace_back(reinterpret_cast<std::uintptr_t>(arena->data()), arena->size());
      }
    }
  }
  return arenas;
}

DataPlane::DataPlane(std::shared_ptr<const Program> program, std::shared_ptr<IoEngine> io, std::int32_t workers,
                     std::string spill_dir)
    : program_(std::move(program)), io_(std::move(io)), ledger_(program_->tiers()), executor_(ExecutorOptions{workers}) {
  const MemoryPlan& plan = program_->memory_plan();
  for (std::size_t tier = 0; tier < program_->tiers().size(); ++tier) {
    ledger_.reserve(static_cast<std::int32_t>(tier), plan.resident_bytes[tier], "the resident buffers");
    const Tier& spec = program_->tiers()[tier];
    const std::int64_t transient = plan.owned_bytes[tier] - plan.owned_resident_bytes[tier];
    if (spec.kind == TierKind::Disk) {  // residents are file ranges; transients live in a spill file
      resident_.push_back(nullptr);
      pools_.push_back(nullptr);
      spill_pools_.push_back(transient > 0 ? spill_pool(spec, transient, io_.get(), spill_dir) : nullptr);
    } else {
      resident_.push_back(std::make_shared<HostArena>(plan.owned_resident_bytes[tier]));
      pools_.push_back(std::make_unique<HostArenaPool>(transient));
      spill_pools_.push_back(nullptr);
    }
  }
  resident_bound_.resize(program_->buffers().size());
  for (const Queue& queue : program_->queues()) queue_capacities_.push_back(queue.capacity);
  for (const Instruction& instruction : program_->schedule()->instructions()) {
    // A Free runs the moment its last reader ends, on that thread: memory lives exactly as
    // long as the simulator counts it.
    immediate_.push_back(instruction.kind == InstructionKind::Free);
    std::int64_t moved = 0;
    if (instruction.kind != InstructionKind::Compute) {
      for (std::int64_t id : instruction.writes) moved += program_->buffers()[program_->buffer_position(id)].bytes;
    }
    moved_bytes_.push_back(moved);
    device_copy_.push_back(touches_device(*program_, instruction));
    if (instruction.declared_us > 0 && !timer_) timer_ = std::make_unique<DelayTimer>();
  }
  for (const Buffer& buffer : program_->buffers()) {
    if (buffer.crc32c < 0) {
      range_checks_.emplace_back();
      continue;
    }
    range_checks_.push_back({static_cast<std::uint32_t>(buffer.crc32c),
                             std::make_shared<RangeTrust>(program_->files()[buffer.file].verified_as)});
  }
  for (const FileSpec& file : program_->files()) {
    if (io_) files_.push_back(std::make_shared<HeldFile>(io_->backend(), file.path));
    if (file.chunk_bytes == 0) {
      digests_.push_back(nullptr);
      continue;
    }
    auto digests = std::make_shared<FileDigests>();
    digests->chunk_bytes = static_cast<std::uint64_t>(file.chunk_bytes);
    for (const std::string& hex : file.chunk_sha256) digests->chunks.push_back(hex_to_digest(hex));
    digests_.push_back(std::move(digests));
  }
}

void DataPlane::open_files() {
  for (const std::shared_ptr<HeldFile>& file : files_) file->handle();
}

std::shared_ptr<CallMemory> DataPlane::begin_call(double timeout_s) {
  const MemoryPlan& plan = program_->memory_plan();
  const std::size_t tiers = program_->tiers().size();
  std::shared_ptr<CallMemory> memory = resident_memory();
  for (std::size_t tier = 0; tier < tiers; ++tier) memory->booked_[tier] = plan.arena_bytes[tier] - plan.resident_bytes[tier];
  if (!ledger_.reserve_all(memory->booked_, timeout_s, "a call's working set")) {
    throw Error(ErrorCode::ResourceExhausted, "no room for another call within " + std::to_string(timeout_s) +
                                                  " s: concurrent calls hold the budget");
  }
  try {
    for (std::size_t tier = 0; tier < tiers; ++tier) {
      if (pools_[tier]) memory->transient_[tier] = pools_[tier]->acquire();
      if (spill_pools_[tier]) memory->spill_[tier] = spill_pools_[tier]->acquire();
    }
  } catch (...) {
    ledger_.release_all(memory->booked_);
    throw;
  }
  return memory;
}

std::shared_ptr<CallMemory> DataPlane::resident_memory() const {
  auto memory = std::make_shared<CallMemory>();
  memory->program_ = program_.get();
  memory->resident_ = resident_;
  memory->transient_.resize(resident_.size());
  memory->spill_.resize(resident_.size());
  memory->booked_.assign(resident_.size(), 0);
  memory->live_.assign(program_->buffers().size(), false);
  memory->live_bytes_.assign(resident_.size(), 0);
  memory->peak_.assign(resident_.size(), 0);
  std::lock_guard lock(bound_mutex_);
  memory->bound_ = resident_bound_;
  return memory;
}

void DataPlane::bind_resident(std::int64_t buffer_id, std::byte* address, std::int64_t bytes) {
  const std::size_t position = bindable(*program_, buffer_id, address, bytes, "data plane bind_resident");
  const Buffer& buffer = program_->buffers()[position];
  if (buffer.lifetime != BufferLifetime::Resident) {
    throw Error(ErrorCode::InvalidArgument, "data plane bind_resident: " + buffer_name(buffer) + " is " +
                                                buffer_lifetime_name(buffer.lifetime) +
                                                ", not resident: bind it per call (CallMemory::bind)");
  }
  std::lock_guard lock(bound_mutex_);
  resident_bound_[position] = address;
}

void DataPlane::end_call(const std::shared_ptr<CallMemory>& memory) {
  {
    std::lock_guard lock(memory->mutex_);
    if (memory->in_progress_ > 0) {  // after a stall: the last one to end gives the booking back
      memory->ended_ = true;
      return;
    }
  }
  release_booking(*memory);
}

void DataPlane::instruction_ended(CallMemory& memory) {
  bool last = false;
  {
    std::lock_guard lock(memory.mutex_);
    last = --memory.in_progress_ == 0 && memory.ended_;
  }
  if (last) release_booking(memory);
}

void DataPlane::release_booking(CallMemory& memory) {
  ledger_.release_all(memory.booked_);
  memory.booked_.assign(memory.booked_.size(), 0);
  memory.spill_.assign(memory.spill_.size(), nullptr);
  // The arenas go back to their pool now (or once the views of them go), not when the last
  // handle of the call does: a thread that completed its last instruction may hold one a
  // moment longer, and the next call would then take a second arena.
  memory.transient_.assign(memory.transient_.size(), nullptr);
}

void DataPlane::start(const std::shared_ptr<CallMemory>& memory, const ComputeKernel& compute,
                      const DeviceCopyKernel& device_copy, const Instruction& instruction, std::size_t position,
                      Completion done) {
  // Work done before the declared time waits for it on the timer, holding no thread; a
  // failure completes at once.
  using Clock = DelayTimer::Clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double, std::micro>(instruction.declared_us));
  // The call counts the instruction as in progress until just before its completion: its
  // working set stays booked until then, even after a stall (see end_call).
  auto finished = [this, memory, done, deadline](std::exception_ptr failure = nullptr) {
    if (failure || !timer_ || Clock::now() >= deadline) {
      instruction_ended(*memory);
      return done(std::move(failure));
    }
    timer_->at(deadline, [this, memory, done] {
      instruction_ended(*memory);
      done();
    });
  };
  for (std::size_t buffer : program_->first_writes()[position]) memory->take(buffer);
  const auto& buffers = program_->buffers();
  switch (instruction.kind) {
    case InstructionKind::Compute:
      compute(instruction);
      finished();
      return;
    case InstructionKind::Load: {
      if (!io_) throw Error(ErrorCode::Internal, "data plane: a load, but the program was given no I/O engine");
      const std::size_t from = program_->buffer_position(instruction.reads[0]);
      const std::size_t to = program_->buffer_position(instruction.writes[0]);
      const Buffer& range = buffers[from];
      std::shared_ptr<HeldFile> file = files_[range.file];
      ReadRequest request;
      request.path = file->path();
      request.handle = file->handle();
      request.named = true;
      request.offset = static_cast<std::uint64_t>(range.file_offset);
      request.length = static_cast<std::uint64_t>(range.bytes);
      request.destination = memory->address(to);
      request.digests = digests_[range.file];
      request.range_crc32c = range_checks_[from].crc32c;
      request.trust = range_checks_[from].trust;
      // Completes on an I/O thread; no executor thread waits for it. The read holds the file open.
      io_->submit(std::move(request), [finished, file](std::exception_ptr error) { finished(std::move(error)); });
      return;
    }
    case InstructionKind::Copy:
      if (device_copy_[position]) {
        if (!device_copy) {
          throw Error(ErrorCode::InvalidArgument, "data plane: copy " + std::to_string(instruction.id) + " ('" +
                                                      instruction.label +
                                                      "') touches a device tier, but the run was given no device "
                                                      "copy kernel");
        }
        // The caller completes it, typically from the thread that sees the device's event.
        device_copy(instruction, [finished](std::exception_ptr failure) { finished(std::move(failure)); });
        return;
      }
      for (std::size_t i = 0; i < instruction.reads.size(); ++i) {
        const std::size_t from = program_->buffer_position(instruction.reads[i]);
        if (buffers[from].bytes == 0) continue;  // no bytes, so no address: a value Python carries itself
        const std::size_t to = program_->buffer_position(instruction.writes[i]);
        std::memcpy(memory->address(to), memory->address(from), static_cast<std::size_t>(buffers[from].bytes));
      }
      finished();
      return;
    case InstructionKind::Free:
      for (std::size_t buffer : program_->frees()[position]) memory->give(buffer);
      finished();
      return;
    case InstructionKind::Spill:
    case InstructionKind::Reload: {
      const bool spill = instruction.kind == InstructionKind::Spill;
      const std::size_t host = program_->buffer_position(spill ? instruction.reads[0] : instruction.writes[0]);
      const std::size_t disk = program_->buffer_position(spill ? instruction.writes[0] : instruction.reads[0]);
      const Buffer& spilled = buffers[disk];
      if (spilled.bytes == 0) return finished();  // no bytes, so no place in the spill file
      // The request holds the file, so it stays open (and out of the pool) until the request completes.
      std::shared_ptr<SpillFile> file = memory->spill_[spilled.tier];
      if (!file) {
        throw Error(ErrorCode::InvalidArgument, std::string(instruction_kind_name(instruction.kind)) + " " +
                                                    std::to_string(instruction.id) +
                                                    ": this memory has no spill file (only a call's memory, from "
                                                    "begin_call until end_call, holds one)");
      }
      const MemoryPlan& plan = program_->memory_plan();
      const auto offset = static_cast<std::uint64_t>(plan.offsets[disk] - plan.owned_resident_bytes[spilled.tier]);
      const auto length = static_cast<std::uint64_t>(spilled.bytes);
      std::byte* bytes = memory->address(host);
      IoCallback complete = [finished, file](std::exception_ptr error) { finished(std::move(error)); };
      // Both complete on an I/O thread; no executor thread waits for them.
      if (spill) {
        io_->submit_write({.handle = file->handle(), .offset = offset, .length = length, .source = bytes,
                           .name = file->name()},
                          std::move(complete));
      } else {
        ReadRequest request;
        request.path = file->name();
        request.offset = offset;
        request.length = length;
        request.destination = bytes;
        request.handle = file->handle();
        io_->submit(std::move(request), std::move(complete));
      }
      return;
    }
  }
  throw Error(ErrorCode::Internal, "data plane: unknown instruction kind");
}

RunReport DataPlane::run(const std::shared_ptr<CallMemory>& memory, ComputeKernel compute, RunOptions options,
                         DeviceCopyKernel device_copy) {
  options.queue_capacities = queue_capacities_;
  options.immediate = immediate_;
  const Instruction* first = program_->schedule()->instructions().data();
  AsyncKernel kernel = [this, memory, compute = std::move(compute), device_copy = std::move(device_copy),
                        first](const Instruction& instruction, Completion done) {
    {
      std::lock_guard lock(memory->mutex_);
      ++memory->in_progress_;
    }
    try {
      start(memory, compute, device_copy, instruction, static_cast<std::size_t>(&instruction - first),
            std::move(done));
    } catch (...) {
      instruction_ended(*memory);  // it failed before anything could complete it
      throw;
    }
  };
  RunReport report;
  try {
    report = executor_.run_async(program_->schedule(), std::move(kernel), options);
  } catch (...) {
    memory->give_all();
    throw;
  }
  for (std::size_t i = 0; i < moved_bytes_.size(); ++i) report.records[i].bytes = moved_bytes_[i];
  summarize_reads(report);
  return report;
}

}  // namespace tt

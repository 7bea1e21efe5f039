// Runs a Program: Load, Spill, Reload, Copy and Free natively (the I/O engine, memcpy, the
// ledger); Compute through a callback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "tt/ir/program.h"
#include "tt/memory/host_arena.h"
#include "tt/memory/ledger.h"
#include "tt/runtime/delay_timer.h"
#include "tt/runtime/executor.h"
#include "tt/storage/held_file.h"
#include "tt/storage/io_engine.h"
#include "tt/storage/spill_file.h"

namespace tt {

// The memory of one call: a transient arena per memory tier and a spill file per Disk tier
// that spills, from the data plane's pools, held until the last handle (the call, or a torch
// view of its bytes) drops (the spill files go back at end_call), and the addresses bound to
// the buffers whose bytes the core does not own (inputs, torch-owned buffers). Thread-safe to
// read; its buffers are written by the instructions that own them.
//
// It derives from enable_shared_from_this so that a handle Python passes back (to run,
// view, end_call) shares the core's own ownership instead of holding a Python reference:
// an I/O or timer thread may drop the last handle of a completing instruction, and must
// never need the GIL to do so (the main thread may hold it while joining that thread).
class CallMemory : public std::enable_shared_from_this<CallMemory> {
 public:
  // The address of buffer `position` (of program.buffers()): in the resident or this
  // call's arena, or the one bound to an input or torch-owned buffer (Error(InvalidArgument)
  // naming the buffer when none is); Error(InvalidArgument) for file ranges and spilled
  // buffers (bytes in a file, not in memory).
  std::byte* address(std::size_t position) const;

  // Binds an input or torch-owned buffer (transient or resident) to `bytes` at `address`
  // for this call: memory the caller keeps alive until the call's run returns. Thread-safe:
  // call it before run, or from a compute callback before any reader of the buffer starts
  // (the dependency that orders them publishes it). Overrides the plane's binding of a
  // resident. Error(InvalidArgument) naming the buffer: an unknown id, a buffer the core
  // holds or a file range, `bytes` other than the buffer's, or a null address for a
  // non-empty buffer.
  void bind(std::int64_t buffer_id, std::byte* address, std::int64_t bytes);

  // The arena holding buffer `position` and the buffer's offset in it, for zero-copy views.
  std::pair<std::shared_ptr<HostArena>, std::int64_t> locate(std::size_t position) const;

  // Per tier: the residents plus the most transient bytes this call held live at once,
  // counted as the simulator counts them (first writer's start to its Free's end).
  std::vector<std::int64_t> peak_bytes() const;

  // The host arenas this call reads and writes, the residents' and its own, as (address,
  // bytes): for a device backend to page-lock once. Pooled arenas return to their pool and
  // are reused, so the same ones recur from call to call.
  std::vector<std::pair<std::uintptr_t, std::int64_t>> host_arenas() const;

 private:
  friend class DataPlane;
  void take(std::size_t position);   // a buffer's life starts
  void give(std::size_t position);   // it ends
  void give_all();                   // after a failure: whatever is still live

  const Program* program_ = nullptr;
  std::vector<std::shared_ptr<HostArena>> resident_;   // per tier, shared by every call
  std::vector<std::shared_ptr<HostArena>> transient_;  // per memory tier, this call's
  std::vector<std::shared_ptr<SpillFile>> spill_;      // per Disk tier that spills, this call's
  std::vector<std::int64_t> booked_;                   // per tier: what begin_call reserved in the ledger
  mutable std::mutex mutex_;
  std::vector<bool> live_;                             // per buffer
  std::vector<std::optional<std::byte*>> bound_;       // per buffer: where an input or torch-owned one is
  std::vector<std::int64_t> live_bytes_, peak_;        // per tier, transients only
  // Instructions of this call started and not completed yet, and whether end_call came
  // while some were (after a stall). Guarded by mutex_.
  std::int64_t in_progress_ = 0;
  bool ended_ = false;
};

// What the Python side runs for a Compute instruction; may throw.
using ComputeKernel = std::function<void(const Instruction& instruction)>;

// Ends an instruction a DeviceCopyKernel started: called once, from any thread, with
// nullptr on success or the failure.
using Finish = std::function<void(std::exception_ptr failure)>;

// What the caller runs for a Copy that touches a Device tier. A device's memory is the
// caller's (its buffers are torch-owned: the core plans and counts them, never touches
// their bytes), so the caller moves the bytes on the device's own queues and calls `done`
// once the copy has completed, typically later from another thread: no thread of the
// core waits for it. May throw instead of calling `done`.
using DeviceCopyKernel = std::function<void(const Instruction& instruction, Finish done)>;

// One program's runtime: its resident arenas (allocated once), pools of per-call arenas and
// spill files, the ledger that enforces each tier's budget (a Disk tier's transient bytes are
// its spill file's), and the I/O engine its loads, spills and reloads use. The ledger admits a
// call only with room for its whole transient plan (the memory plan bounds what any run order
// holds), so concurrent calls never exceed a budget. run() is thread-safe; concurrent calls
// share the residents and each take their own arenas and spill files.
class DataPlane {
 public:
  // Allocates the resident arenas and books the residents in the ledger. A program that spills
  // (a Disk tier with transient bytes) needs `io` and `spill_dir`, an existing directory where
  // its spill files are created (anonymous: see SpillFile); the first one is created here, so a
  // bad directory fails now. Throws Error(InvalidArgument) naming the tier when a program that
  // spills has no I/O engine or no spill directory, Error(NotFound) or Error(IO) when the spill
  // file cannot be created, and Error(ResourceExhausted) if the residents alone exceed a tier.
  DataPlane(std::shared_ptr<const Program> program, std::shared_ptr<IoEngine> io, std::int32_t workers,
            std::string spill_dir = {});

  // Opens every file the program's loads read, now rather than at its first load; from then
  // on the plane reads these files whatever happens to their paths (see HeldFile). Errors as
  // IoBackend::open. Does nothing without an I/O engine.
  void open_files();

  // A new call's memory (arenas and spill files from the pools, and the plane's resident
  // bindings). Waits up to timeout_s for room in the ledger for the call's transient bytes
  // (the Disk tiers' too) when other calls hold it; Error(ResourceExhausted) when there is no
  // room by then, and the spill file's errors when a new one cannot be created.
  std::shared_ptr<CallMemory> begin_call(double timeout_s);

  // Runs every instruction of the program for the call that owns `memory`: loads, spills
  // (the host buffer's bytes written at the Disk buffer's offset in the call's spill file) and
  // reloads (read back into the host buffer) through the I/O engine, completing
  // asynchronously; copies between host tiers and frees natively without the GIL; copies
  // that touch a Device tier through `device_copy` (Error(InvalidArgument) naming the copy
  // when there is none); compute through `compute`. A
  // failed spill or reload fails the run with its Error(IO), which names the spill file's
  // directory, the offset, the length and the OS reason. An instruction whose work ends
  // before its declared_us has passed (since it started) completes at that deadline, from
  // the plane's timer: no thread waits for it; a failure completes at once. Returns or throws only once nothing
  // of the call is in progress (after a stall: see Executor::run), so its arenas are no
  // longer written.
  RunReport run(const std::shared_ptr<CallMemory>& memory, ComputeKernel compute, RunOptions options,
                DeviceCopyKernel device_copy = nullptr);

  // The resident buffers alone (for filling them before the first call): a CallMemory
  // without transient arenas, booking nothing, with the plane's resident bindings.
  std::shared_ptr<CallMemory> resident_memory() const;

  // Binds a resident, torch-owned buffer to `bytes` at `address` for every call begun after
  // it (and resident_memory()): a tensor the caller keeps alive as long as the plane.
  // Meant for before calls start; thread-safe. Error(InvalidArgument) as CallMemory::bind,
  // and for a buffer that is not resident.
  void bind_resident(std::int64_t buffer_id, std::byte* address, std::int64_t bytes);

  // Gives back the call's transient bytes (booked by begin_call) and its spill files (to the
  // pool, once no write or read of them is in flight); the arenas go back to the pool once
  // every view of them is gone, even while a thread still holds the call's handle, whose
  // transient buffers then have no address. After a stall, while instructions of the call still run,
  // both stay the call's until the last of them ends: no later call is admitted into
  // memory that one may still write.
  void end_call(const std::shared_ptr<CallMemory>& memory);

  const Program& program() const noexcept { return *program_; }
  MemoryLedger& ledger() noexcept { return ledger_; }
  const std::shared_ptr<HostArena>& resident_arena(std::size_t tier) const { return resident_[tier]; }
  IoEngine& io() noexcept { return *io_; }

 private:
  void instruction_ended(CallMemory& memory);  // the last one after end_call releases the booking
  void release_booking(CallMemory& memory);
  void start(const std::shared_ptr<CallMemory>& memory, const ComputeKernel& compute,
             const DeviceCopyKernel& device_copy, const Instruction& instruction, std::size_t position,
             Completion done);

  std::shared_ptr<const Program> program_;
  std::shared_ptr<IoEngine> io_;
  // The ledger and the timer come before the executor, so that they outlive it: its
  // destructor waits for a stalled run's late completions, which may still pass through the
  // timer and give a call's booking back to the ledger.
  MemoryLedger ledger_;                // per tier: residents, plus each call's live transients
  std::unique_ptr<DelayTimer> timer_;  // completes instructions at their declared time; only when one declares one
  Executor executor_;
  std::vector<std::shared_ptr<HostArena>> resident_;
  mutable std::mutex bound_mutex_;
  std::vector<std::optional<std::byte*>> resident_bound_;   // per buffer, guarded by bound_mutex_: bind_resident's
  std::vector<std::unique_ptr<HostArenaPool>> pools_;         // per tier, null for Disk tiers
  std::vector<std::unique_ptr<SpillFilePool>> spill_pools_;  // per tier, null but for Disk tiers that spill
  std::vector<std::shared_ptr<const FileDigests>> digests_;  // per file, null without digests
  std::vector<std::shared_ptr<HeldFile>> files_;  // per file (with an I/O engine): opened by the first load, then held
  struct RangeCheck {
    std::optional<std::uint32_t> crc32c;  // the file range's own checksum; absent: not checked
    std::shared_ptr<RangeTrust> trust;    // with a checksum, shared by the range's loads across calls
  };
  std::vector<RangeCheck> range_checks_;  // per buffer
  // Fixed per program, so computed once rather than on every call:
  std::vector<std::int32_t> queue_capacities_;  // per queue
  std::vector<bool> immediate_;                 // per position: a Free, run the moment its last reader ends
  std::vector<std::int64_t> moved_bytes_;       // per position: bytes a load or copy writes
  std::vector<bool> device_copy_;               // per position: a copy that touches a Device tier
};

}  // namespace tt

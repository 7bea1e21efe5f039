// Runs a schedule's instruction DAG on a pool of worker threads, by dependency counts and per-queue capacities.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tt/ir/schedule.h"
#include "tt/runtime/cancel_token.h"
#include "tt/runtime/run_report.h"

namespace tt {

// The work an instruction stands for. Called on a worker thread, at most once per
// instruction per run; may throw anything, and the first exception of a run is rethrown
// unchanged (same type) from Executor::run on the caller's thread.
using Kernel = std::function<void(const Instruction& instruction)>;

class Executor;
struct RunState;       // per-run bookkeeping, private to executor.cc
struct CompletionState;

// Ends one instruction that an AsyncKernel started. Call it exactly once, from any thread,
// with nullptr on success or the failure; the run keeps going from there. Called before
// the kernel returns, the instruction counts as finished inline (the same thread goes on
// with its successors); called later, for example by an I/O thread, no thread was held
// while the work was in progress. Copyable; copies share one completion.
class Completion {
 public:
  void operator()(std::exception_ptr failure = nullptr) const;

 private:
  friend class Executor;
  Completion(Executor* executor, std::shared_ptr<CompletionState> state)
      : executor_(executor), state_(std::move(state)) {}
  Executor* executor_;
  std::shared_ptr<CompletionState> state_;
};

// Starts the work of an instruction and arranges for `done` to be called when it ends
// (inline, or later from another thread). May throw instead of calling `done`.
using AsyncKernel = std::function<void(const Instruction& instruction, Completion done)>;

struct ExecutorOptions {
  std::int32_t workers = 1;               // worker threads, >= 1
};

struct RunOptions {
  std::int32_t max_concurrent = 0;        // instructions without a queue (queue == -1) in flight at once; 0: no cap
  double stall_timeout_s = 300.0;         // > 0: fail with Error(Stalled) after this long without any instruction finishing
  std::shared_ptr<CancelToken> cancel;    // shared with the caller; may be null
  bool caller_runs = true;                // the calling thread runs instructions too (see run())
  // Per queue index: how many of its instructions may be in flight at once (>= 1). An
  // instruction's queue must be -1 or an index into this list.
  std::vector<std::int32_t> queue_capacities = {};
  // Per schedule position (or empty): instructions that run on the thread that makes them
  // ready, before anything else it does. For cheap native work, such as a Free, whose
  // timing should follow its last reader exactly.
  std::vector<bool> immediate = {};
};

// Owns its worker threads: spawned in the constructor, joined in the
// destructor (which waits for kernels still running after a stall). run() is
// thread-safe: several callers may run schedules at once and share
// the workers. The executor must outlive every run() call.
class Executor {
 public:
  // Throws Error(InvalidArgument) if options.workers < 1.
  explicit Executor(ExecutorOptions options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs every instruction of `schedule` after all of its dependencies, calling `kernel`
  // for each, and blocks until the run ends. Independent instructions run concurrently
  // on different threads (up to options.max_concurrent). When an instruction finishes
  // and makes a successor ready, the same thread runs it next.
  //
  // With options.caller_runs the calling thread is a worker of its own run (recorded as
  // worker 0; pool workers are 1..workers()): it takes the first root and every ready
  // instruction nobody else has taken, so a chain runs entirely on the caller. Compute
  // libraries keep per-thread state (OpenMP thread teams, allocator caches) that extra
  // threads would duplicate and contend for; the pool only helps with parallel branches.
  // The cost: a kernel running on the caller cannot be abandoned, so a stall inside it is
  // reported when it returns rather than at the timeout.
  //
  // Ends early, throwing, when:
  //  - a kernel throws: no further instruction starts; run() waits for those in flight,
  //    then rethrows the first exception;
  //  - options.cancel is consumed (checked at the start and before every instruction):
  //    Error(Cancelled);
  //  - no instruction finishes for options.stall_timeout_s while some are in flight:
  //    Error(Stalled) naming the instructions still running. run() returns at once
  //    without waiting for them; their workers stay busy until the kernels return.
  //
  // The run keeps `schedule` and `kernel` alive until its last in-flight kernel call
  // returns, which after a stall may be later than run() itself.
  //
  // Each queue (options.queue_capacities) runs at most its capacity of instructions at
  // once; among an instruction's ready peers the lowest position starts first.
  //
  // Returns the telemetry of the run. Throws Error(InvalidArgument) for bad options.
  RunReport run(std::shared_ptr<const Schedule> schedule, Kernel kernel, const RunOptions& options);

  // As run(), with a kernel that may complete instructions asynchronously (see
  // Completion). An instruction in progress counts against its queue until it completes;
  // the run returns (or rethrows) only once every started instruction has completed,
  // except after a stall, as for run().
  RunReport run_async(std::shared_ptr<const Schedule> schedule, AsyncKernel kernel, const RunOptions& options);

  // Number of worker threads.
  std::int32_t workers() const noexcept { return static_cast<std::int32_t>(threads_.size()); }

 private:
  struct Task {
    std::shared_ptr<RunState> run;
    std::size_t index;  // position in the run's schedule
  };

  friend class Completion;

  void worker_loop(std::int32_t worker);
  // Runs `task` and what it makes ready on this thread: immediate instructions first, then
  // at most one other (none with `immediates_only`: a thread completing asynchronous work,
  // recorded as worker workers() + 1, runs no kernel of its own); the rest go to the pool.
  void execute(std::int32_t worker, Task task, bool immediates_only = false);
  // Finishes the instruction of `completion` off any worker: its successors are queued.
  void finish_elsewhere(CompletionState& completion);
  // One started instruction is no longer pending; wakes the destructor after the last.
  void release_pending();
  void push(std::vector<Task> tasks, RunState& run);
  // Removes and returns a queued instruction of `run`, if any (the caller's share of it).
  bool take_queued(const RunState& run, std::size_t& index);

  std::mutex mutex_;
  std::condition_variable work_available_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  // Asynchronous completions not yet delivered; the destructor waits for them, so a late
  // completion (after a stall) never touches a destroyed executor.
  std::atomic<std::size_t> pending_async_{0};  // counted without mutex_; the last decrement notifies under it
  std::condition_variable async_drained_;
};

}  // namespace tt

// Thread-pool executor: dispatches a schedule's instructions as their dependency counts reach zero.
#include "tt/runtime/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <optional>
#include <queue>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "tt/common/error.h"
#include "tt/common/thread_name.h"

namespace tt {

using Clock = std::chrono::steady_clock;

// Bookkeeping of one run(). Shared by the caller, every Task and every pending
// Completion of the run, so it stays alive for work still running after run() gave up on
// a stall.
struct RunState {
  RunState(std::shared_ptr<const Schedule> schedule_in, AsyncKernel kernel_in, RunOptions options_in)
      : schedule(std::move(schedule_in)),
        kernel(std::move(kernel_in)),
        options(std::move(options_in)),
        records(schedule->size()),
        start(Clock::now()),
        queue_in_flight(options.queue_capacities.size() + 1, 0),
        held(options.queue_capacities.size() + 1),
        last_progress(start) {
    remaining.reserve(schedule->size());
    for (std::size_t i = 0; i < schedule->size(); ++i) remaining.push_back(schedule->dependency_count(i));
  }

  const std::shared_ptr<const Schedule> schedule;
  AsyncKernel kernel;  // dropped by the caller once nothing can call it (see run_async)
  RunOptions options;  // read only, but run_async takes the cancel token out at the end

  // records[i] is written only by the thread that starts instruction i and the one that
  // completes it, in that order, before the finish is reported under `mutex`; the caller
  // reads it only after in_flight reaches zero.
  std::vector<InstructionRecord> records;
  const Clock::time_point start;

  // Everything below is guarded by `mutex`.
  std::mutex mutex;
  // Notified when in_flight drops to zero or instructions of this run are queued.
  std::condition_variable changed;
  std::uint64_t queued_epoch = 0;  // bumped whenever instructions of this run are queued
  std::vector<std::size_t> remaining;  // unfinished dependencies per instruction
  // Dispatched instructions (queued, running or waiting for their completion). When zero
  // the run is over: each finish dispatches its newly ready successors first.
  std::size_t in_flight = 0;
  std::vector<std::size_t> queue_in_flight;  // the same, per queue; the last slot: instructions without a queue
  std::size_t finished = 0;
  std::set<std::size_t> running;  // positions whose work is in progress, for the stall message
  // Ready but not dispatched because their queue was full; lowest position first.
  using Held = std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>>;
  std::vector<Held> held;
  bool failed = false;        // no instruction may start any more
  std::exception_ptr error;   // the first failure; rethrown by run()
  Clock::time_point last_progress;

  double micros_since_start() const {
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }

  const Instruction& instruction(std::size_t index) const { return schedule->instructions()[index]; }

  // The queue slot of an instruction: its queue, or the shared slot after the queues.
  std::size_t queue_of(std::size_t index) const {
    const std::int32_t queue = instruction(index).queue;
    return queue < 0 ? options.queue_capacities.size() : static_cast<std::size_t>(queue);
  }

  bool has_room(std::size_t queue) const {
    if (queue < options.queue_capacities.size()) {
      return queue_in_flight[queue] < static_cast<std::size_t>(options.queue_capacities[queue]);
    }
    return options.max_concurrent == 0 || queue_in_flight[queue] < static_cast<std::size_t>(options.max_concurrent);
  }

  // Requires `mutex`. True when nothing has finished for longer than the stall timeout.
  bool stalled(Clock::time_point now) const;

  // Requires `mutex`. Moves held instructions into `dispatch` while their queues have room.
  void release_held(std::vector<std::size_t>& dispatch) {
    for (std::size_t queue = 0; queue < held.size(); ++queue) {
      while (!held[queue].empty() && has_room(queue)) {
        ++in_flight;
        ++queue_in_flight[queue];
        dispatch.push_back(held[queue].top());
        held[queue].pop();
      }
    }
  }

  // Requires `mutex`. The first error wins; later ones are dropped.
  void fail(std::exception_ptr failure) {
    if (!error) error = std::move(failure);
    failed = true;
    for (Held& waiting : held) waiting = {};  // never started, so their records keep ran == false
  }

  // Requires `mutex`. Gives up one dispatch slot and wakes the caller when it was the last.
  void leave(std::size_t index) {
    --queue_in_flight[queue_of(index)];
    if (--in_flight == 0) changed.notify_all();
  }
};

// One started instruction of a run, until its Completion is called.
struct CompletionState {
  std::shared_ptr<RunState> run;
  std::size_t index = 0;
  std::exception_ptr failure;  // written before `phase` moves, read after
  // 0: the kernel is running and done was not called; 1: done was called before the
  // kernel returned (the starting thread finishes it); 2: the kernel returned first (the
  // thread that calls done finishes it).
  std::atomic<int> phase{0};
};

namespace {

std::string display_name(const Instruction& instruction) {
  return instruction.label.empty() ? "instruction " + std::to_string(instruction.id) : instruction.label;
}

void validate(const std::shared_ptr<const Schedule>& schedule, bool has_kernel, const RunOptions& options) {
  if (!schedule) throw Error(ErrorCode::InvalidArgument, "executor: schedule is null");
  if (!has_kernel) throw Error(ErrorCode::InvalidArgument, "executor: kernel is empty");
  if (!(options.stall_timeout_s > 0.0) || !std::isfinite(options.stall_timeout_s)) {
    throw Error(ErrorCode::InvalidArgument,
                "executor: stall_timeout_s must be positive and finite, got " + std::to_string(options.stall_timeout_s));
  }
  if (options.max_concurrent < 0) {
    throw Error(ErrorCode::InvalidArgument,
                "executor: max_concurrent must be >= 0, got " + std::to_string(options.max_concurrent));
  }
  for (std::size_t q = 0; q < options.queue_capacities.size(); ++q) {
    if (options.queue_capacities[q] < 1) {
      throw Error(ErrorCode::InvalidArgument, "executor: queue " + std::to_string(q) + " has capacity " +
                                                  std::to_string(options.queue_capacities[q]) + "; expected >= 1");
    }
  }
  if (!options.immediate.empty() && options.immediate.size() != schedule->size()) {
    throw Error(ErrorCode::InvalidArgument, "executor: immediate has " + std::to_string(options.immediate.size()) +
                                                " entries for " + std::to_string(schedule->size()) + " instructions");
  }
  for (const Instruction& instruction : schedule->instructions()) {
    if (instruction.queue >= static_cast<std::int32_t>(options.queue_capacities.size()) || instruction.queue < -1) {
      throw Error(ErrorCode::InvalidArgument, "executor: " + display_name(instruction) + " runs on queue " +
                                                  std::to_string(instruction.queue) + " but the run has " +
                                                  std::to_string(options.queue_capacities.size()) + " queues");
    }
  }
}

// Requires the run's mutex. Builds the Stalled error naming what the run still waits for.
Error stall_error(const RunState& state) {
  std::ostringstream message;
  message << "no instruction finished in " << state.options.stall_timeout_s << " s; still running: ";
  if (state.running.empty()) {
    // Everything dispatched is queued behind other runs' kernels on busy workers.
    message << "none (" << state.in_flight << " waiting for a worker)";
  }
  const char* separator = "";
  for (std::size_t index : state.running) {
    message << separator << display_name(state.instruction(index));
    separator = ", ";
  }
  return Error(ErrorCode::Stalled, message.str());
}

// Requires the run's mutex. Books the end of instruction `index` (its work done, with
// `failure` or not) and returns the instructions that became dispatchable.
std::vector<std::size_t> finish(RunState& state, std::size_t index, std::exception_ptr failure) {
  InstructionRecord& record = state.records[index];
  record.end_us = state.micros_since_start();
  record.ran = true;
  state.running.erase(index);
  ++state.finished;
  const Clock::time_point now = Clock::now();
  if (!failure && !state.failed && state.stalled(now)) {
    // Nobody could watch this instruction (it ran on the caller, or the caller was busy):
    // report the stall now that it has returned.
    failure = std::make_exception_ptr(
        Error(ErrorCode::Stalled, display_name(state.instruction(index)) + " ran " +
                                      std::to_string((record.end_us - record.start_us) / 1e6) +
                                      " s while no other instruction finished; the stall timeout is " +
                                      std::to_string(state.options.stall_timeout_s) + " s"));
  }
  state.last_progress = now;
  std::vector<std::size_t> dispatch;
  if (failure) {
    state.fail(std::move(failure));
  } else if (!state.failed) {
    for (std::size_t successor : state.schedule->successors(index)) {
      if (--state.remaining[successor] == 0) state.held[state.queue_of(successor)].push(successor);
    }
  }
  state.leave(index);
  state.release_held(dispatch);
  std::sort(dispatch.begin(), dispatch.end());
  return dispatch;
}

}  // namespace

bool RunState::stalled(Clock::time_point now) const {
  return now - last_progress > std::chrono::duration<double>(options.stall_timeout_s);
}

void Completion::operator()(std::exception_ptr failure) const {
  CompletionState& completion = *state_;
  completion.failure = std::move(failure);
  int expected = 0;
  if (completion.phase.compare_exchange_strong(expected, 1)) return;  // the starting thread finishes it
  executor_->finish_elsewhere(completion);
}

Executor::Executor(ExecutorOptions options) {
  if (options.workers < 1) {
    throw Error(ErrorCode::InvalidArgument, "executor: workers must be >= 1, got " + std::to_string(options.workers));
  }
  threads_.reserve(static_cast<std::size_t>(options.workers));
  try {
    for (std::int32_t worker = 0; worker < options.workers; ++worker) {
      threads_.emplace_back([this, worker] { worker_loop(worker + 1); });  // 0 is the caller
    }
  } catch (...) {
    // The destructor will not run for a half-built executor; stop the threads we have.
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_available_.notify_all();
    for (std::thread& thread : threads_) thread.join();
    throw;
  }
}

Executor::~Executor() {
  {
    std::unique_lock lock(mutex_);
    // Work still in progress after a stall completes into this executor; wait for it.
    async_drained_.wait(lock, [this] { return pending_async_.load(std::memory_order_acquire) == 0; });
    stopping_ = true;
  }
  work_available_.notify_all();
  // Joining waits for kernels still running after a stall; queued tasks are dropped.
  for (std::thread& thread : threads_) thread.join();
}

void Executor::push(std::vector<Task> tasks, RunState& run) {
  if (tasks.empty()) return;
  {
    std::lock_guard lock(mutex_);
    for (Task& task : tasks) queue_.push_back(std::move(task));
  }
  {
    std::lock_guard lock(run.mutex);
    ++run.queued_epoch;
  }
  run.changed.notify_all();  // an idle caller may take them
  if (tasks.size() == 1) {
    work_available_.notify_one();
  } else {
    work_available_.notify_all();
  }
}

bool Executor::take_queued(const RunState& run, std::size_t& index) {
  std::lock_guard lock(mutex_);
  auto found = std::find_if(queue_.begin(), queue_.end(), [&run](const Task& task) { return task.run.get() == &run; });
  if (found == queue_.end()) return false;
  index = found->index;
  queue_.erase(found);
  return true;
}

void Executor::worker_loop(std::int32_t worker) {
  name_this_thread("tt-exec");
  for (;;) {
    std::unique_lock lock(mutex_);
    work_available_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Task task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    execute(worker, std::move(task));
  }
}

void Executor::finish_elsewhere(CompletionState& completion) {
  RunState& state = *completion.run;
  std::vector<std::size_t> dispatch;
  {
    std::lock_guard lock(state.mutex);
    dispatch = finish(state, completion.index, std::move(completion.failure));
  }
  // Keep the run alive past push: the last Task may finish on a worker before we return.
  std::shared_ptr<RunState> keep = completion.run;
  // Immediate instructions (frees) run here and now, before anything they made ready is
  // handed on, as on a worker: memory is given back the moment its last reader ends,
  // whichever thread completes that reader. Only those: this may be an I/O or timer thread.
  const auto& immediate = state.options.immediate;
  std::vector<Task> tasks;
  for (std::size_t ready : dispatch) {
    if (!immediate.empty() && immediate[ready]) {
      execute(workers() + 1, Task{completion.run, ready}, /*immediates_only=*/true);
    } else {
      tasks.push_back(Task{completion.run, ready});
    }
  }
  push(std::move(tasks), state);
  release_pending();
}

void Executor::release_pending() {
  if (pending_async_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    // Under the mutex, so the destructor cannot miss it between its check and its wait.
    std::lock_guard lock(mutex_);
    async_drained_.notify_all();
  }
}

void Executor::execute(std::int32_t worker, Task task, bool immediates_only) {
  RunState& state = *task.run;
  // This thread's own work: immediate instructions first, then at most one other. A pass
  // that makes successors ready continues with them here, skipping a round trip through
  // the shared queue; the rest go to the pool.
  std::deque<std::size_t> mine{task.index};
  while (!mine.empty()) {
    const std::size_t index = mine.front();
    mine.pop_front();
    const Instruction& instruction = state.instruction(index);
    {
      std::lock_guard lock(state.mutex);
      if (state.failed) {
        state.leave(index);  // skipped: its record keeps ran == false
        continue;
      }
      if (state.options.cancel && state.options.cancel->consume()) {
        state.fail(std::make_exception_ptr(
            Error(ErrorCode::Cancelled, "run cancelled before " + display_name(instruction))));
        state.leave(index);
        continue;
      }
      state.running.insert(index);
    }

    InstructionRecord& record = state.records[index];
    record.worker = worker;
    record.start_us = state.micros_since_start();
    auto completion = std::make_shared<CompletionState>();
    completion->run = task.run;
    completion->index = index;
    pending_async_.fetch_add(1, std::memory_order_relaxed);  // before the kernel can hand the completion on
    try {
      state.kernel(instruction, Completion(this, completion));
    } catch (...) {
      int expected = 0;
      if (completion->phase.compare_exchange_strong(expected, 1)) completion->failure = std::current_exception();
    }
    int expected = 0;
    if (completion->phase.compare_exchange_strong(expected, 2)) continue;  // completes later, elsewhere
    release_pending();  // finished inline; the destructor may be waiting already (a stuck kernel returning)

    std::vector<std::size_t> dispatch;
    {
      std::lock_guard lock(state.mutex);
      dispatch = finish(state, index, std::move(completion->failure));
    }
    const auto& immediate = state.options.immediate;
    bool have_other = immediates_only ||
                      std::any_of(mine.begin(), mine.end(), [&](std::size_t i) { return immediate.empty() || !immediate[i]; });
    std::vector<Task> tasks;
    for (auto ready = dispatch.rbegin(); ready != dispatch.rend(); ++ready) {
      if (!immediate.empty() && immediate[*ready]) mine.push_front(*ready);
    }
    for (std::size_t ready : dispatch) {
      if (!immediate.empty() && immediate[ready]) continue;
      if (!have_other) {
        mine.push_back(ready);
        have_other = true;
      } else {
        tasks.push_back(Task{task.run, ready});
      }
    }
    push(std::move(tasks), state);
  }
}

RunReport Executor::run(std::shared_ptr<const Schedule> schedule, Kernel kernel, const RunOptions& options) {
  if (!kernel) throw Error(ErrorCode::InvalidArgument, "executor: kernel is empty");  // run_async checks the rest
  return run_async(
      std::move(schedule),
      [kernel = std::move(kernel)](const Instruction& instruction, Completion done) {
        kernel(instruction);
        done();
      },
      options);
}

RunReport Executor::run_async(std::shared_ptr<const Schedule> schedule, AsyncKernel kernel,
                              const RunOptions& options) {
  validate(schedule, static_cast<bool>(kernel), options);
  if (options.cancel && options.cancel->consume()) {
    throw Error(ErrorCode::Cancelled, "run cancelled before it started");
  }

  auto state = std::make_shared<RunState>(std::move(schedule), std::move(kernel), options);
  for (std::size_t i = 0; i < state->schedule->size(); ++i) {
    const Instruction& instruction = state->instruction(i);
    InstructionRecord& record = state->records[i];
    record.id = instruction.id;
    record.label = instruction.label;
    record.kind = instruction_kind_name(instruction.kind);
    record.device = instruction.device;
    record.predicted_start_us = instruction.predicted_start_us;
    record.predicted_end_us = instruction.predicted_end_us;
  }

  std::vector<std::size_t> ready;
  {
    std::lock_guard lock(state->mutex);
    for (std::size_t root : state->schedule->roots()) state->held[state->queue_of(root)].push(root);
    state->release_held(ready);
  }
  std::sort(ready.begin(), ready.end());
  std::optional<std::size_t> mine;  // the instruction the caller runs next
  std::vector<Task> tasks;
  for (std::size_t root : ready) {
    if (options.caller_runs && !mine) {
      mine = root;
    } else {
      tasks.push_back(Task{state, root});
    }
  }
  push(std::move(tasks), *state);
  // Wait in slices so the stall check runs even when nothing notifies.
  const std::chrono::duration<double> slice =
      std::min(std::chrono::duration<double>(state->options.stall_timeout_s), std::chrono::duration<double>(0.05));
  for (;;) {
    if (mine) {
      execute(0, Task{state, *mine});
      mine.reset();
    }
    std::uint64_t seen_epoch = 0;
    {
      std::unique_lock lock(state->mutex);
      if (state->in_flight == 0) break;
      if (state->stalled(Clock::now())) {
        // Leave the stuck kernels running: the Tasks own the state. If a kernel already
        // failed, that first error explains the run better than the stall does.
        state->fail(std::make_exception_ptr(stall_error(*state)));
        std::rethrow_exception(std::exchange(state->error, nullptr));
      }
      seen_epoch = state->queued_epoch;
    }
    std::size_t index = 0;
    if (options.caller_runs && take_queued(*state, index)) {
      mine = index;
      continue;
    }
    std::unique_lock lock(state->mutex);
    state->changed.wait_for(lock, slice, [&] {
      return state->in_flight == 0 || (options.caller_runs && state->queued_epoch != seen_epoch);
    });
  }

  // Nothing calls the kernel any more: destroy it here, on the caller's thread, not on
  // whichever thread drops the run last. A kernel may own resources that must be released
  // by a thread the caller knows (a Python callable needs an interpreter that is not
  // shutting down).
  AsyncKernel finished_kernel = std::move(state->kernel);
  // Likewise the cancel token, which may be a Python object: the last completion may come
  // from a thread Python does not know (an I/O or timer thread) and still hold the run.
  std::shared_ptr<CancelToken> finished_cancel;
  {
    std::lock_guard lock(state->mutex);
    finished_cancel = std::move(state->options.cancel);
    // Taking the error out of the state makes its last reference drop on this thread once
    // the caller's handler is done, not on whichever worker releases the state last. The
    // outcome is the same, but ThreadSanitizer cannot see libstdc++'s exception refcount
    // and would report the cross-thread release as a race.
    if (state->error) std::rethrow_exception(std::exchange(state->error, nullptr));
    if (state->finished != state->schedule->size()) {
      throw Error(ErrorCode::Internal, "executor: run ended with " + std::to_string(state->finished) + " of " +
                                           std::to_string(state->schedule->size()) + " instructions finished");
    }
  }

  RunReport report;
  report.records = std::move(state->records);
  report.wall_us = state->micros_since_start();
  report.workers = workers();
  return report;
}

}  // namespace tt

// Per-instruction telemetry of one run, and its Chrome-trace rendering.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

// What happened to one instruction during a run. A plain value.
struct InstructionRecord {
  std::int64_t id = 0;
  std::string label;
  std::string kind;             // instruction_kind_name() of the instruction
  std::string device;
  std::int32_t worker = -1;     // thread that ran it: 0 the caller, 1.. pool workers, workers + 1 a thread completing
                                // asynchronous work (a free run as its last reader ends); -1 if it did not run
  double start_us = 0.0;        // microseconds since the run started
  double end_us = 0.0;
  bool ran = false;             // false when skipped after an error or cancellation
  // The instruction's predicted times, copied from it; both negative when it had none.
  double predicted_start_us = -1.0;
  double predicted_end_us = -1.0;
  std::int64_t bytes = 0;       // bytes it moved (loads and copies); 0 for the rest
};

// A plain value, returned by Executor::run and kept by the Python side as last_report.
struct RunReport {
  std::vector<InstructionRecord> records;  // one per instruction, in schedule order
  double wall_us = 0.0;                    // from the run's start until run() returned
  std::int32_t workers = 0;                // worker threads the executor had
  // What the run read from files (see summarize_reads).
  std::int64_t bytes_read = 0;             // sum over its ran loads
  double read_us = 0.0;                    // time with at least one load in progress
  double read_overlapped_us = 0.0;         // of which some compute ran at the same time
};

// Fills bytes_read, read_us and read_overlapped_us from the records ("load" and "compute" kinds).
void summarize_reads(RunReport& report);

// Chrome trace-event JSON ("traceEvents" with complete "X" events, one thread row per
// thread: "caller" or "worker N") that chrome://tracing and Perfetto open. Skipped instructions are left out.
// Each event's "cat" is the kind; its "args" hold the id, the device and, when both are
// finite and >= 0, predicted_start_us and predicted_end_us, so a viewer can set the
// prediction beside the measured bar.
std::string chrome_trace_json(const RunReport& report);

}  // namespace tt

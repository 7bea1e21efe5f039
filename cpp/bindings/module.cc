// Entry point of tensortorrent._core: the C++ core as seen from Python.
#include "bindings.h"

NB_MODULE(_core, m) {
  m.doc() = "TensorTorrent's native core: schedules, the executor and telemetry.";
  tt::bindings::bind_errors(m);
  tt::bindings::bind_schedule(m);
  tt::bindings::bind_executor(m);
  tt::bindings::bind_storage(m);
  tt::bindings::bind_safetensors(m);
  tt::bindings::bind_io(m);
  tt::bindings::bind_host(m);
  tt::bindings::bind_planner(m);
  tt::bindings::bind_program(m);
  tt::bindings::bind_program_sim(m);
  tt::bindings::bind_memory(m);
  tt::bindings::bind_data_plane(m);
}

// Registration functions of the tensortorrent._core extension, one per binding file.
#pragma once

#include <nanobind/nanobind.h>

namespace tt::bindings {

void bind_errors(nanobind::module_& m);
void bind_schedule(nanobind::module_& m);
void bind_executor(nanobind::module_& m);
void bind_storage(nanobind::module_& m);
void bind_safetensors(nanobind::module_& m);
void bind_io(nanobind::module_& m);
void bind_host(nanobind::module_& m);
void bind_planner(nanobind::module_& m);
void bind_program(nanobind::module_& m);
void bind_program_sim(nanobind::module_& m);
void bind_memory(nanobind::module_& m);
void bind_data_plane(nanobind::module_& m);

}  // namespace tt::bindings

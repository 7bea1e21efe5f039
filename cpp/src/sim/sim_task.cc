// Names of simulated task kinds.
#include "tt/sim/sim_task.h"

namespace tt {

const char* sim_task_kind_name(SimTaskKind kind) {
  switch (kind) {
    case SimTaskKind::Compute:
      return "compute";
    case SimTaskKind::Transfer:
      return "transfer";
  }
  return "unknown";
}

}  // namespace tt

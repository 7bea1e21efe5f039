// Names of instruction kinds, as they appear in reports and traces.
#include "tt/ir/instruction.h"

namespace tt {

const char* instruction_kind_name(InstructionKind kind) {
  switch (kind) {
    case InstructionKind::Compute: return "compute";
    case InstructionKind::Load: return "load";
    case InstructionKind::Copy: return "copy";
    case InstructionKind::Spill: return "spill";
    case InstructionKind::Reload: return "reload";
    case InstructionKind::Free: return "free";
  }
  // Reachable only through a cast from an out-of-range integer (e.g. from the bindings).
  return "unknown";
}

}  // namespace tt

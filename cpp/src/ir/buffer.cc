// Names of tier, queue and lifetime kinds, for messages.
#include "tt/ir/buffer.h"

namespace tt {

const char* tier_kind_name(TierKind kind) {
  switch (kind) {
    case TierKind::Host: return "host";
    case TierKind::Device: return "device";
    case TierKind::Disk: return "disk";
  }
  return "unknown";
}

const char* queue_kind_name(QueueKind kind) {
  switch (kind) {
    case QueueKind::Compute: return "compute";
    case QueueKind::Io: return "io";
    case QueueKind::Link: return "link";
  }
  return "unknown";
}

const char* buffer_lifetime_name(BufferLifetime lifetime) {
  switch (lifetime) {
    case BufferLifetime::Resident: return "resident";
    case BufferLifetime::Transient: return "transient";
    case BufferLifetime::Input: return "an input";
  }
  return "unknown";
}

}  // namespace tt

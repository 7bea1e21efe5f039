// Thread names through pthread_setname_np, where the platform has it.
#include "tt/common/thread_name.h"

#include <pthread.h>

#include <cstring>

namespace tt {

void name_this_thread(const char* name) noexcept {
#if defined(__linux__)
  char kept[16] = {};  // no allocation in a noexcept function
  std::strncpy(kept, name, sizeof(kept) - 1);
  pthread_setname_np(pthread_self(), kept);
#else
  (void)name;
#endif
}

}  // namespace tt

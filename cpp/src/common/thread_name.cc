// Thread names through pthread_setname_np, where the platform has it.
#include "tt/common/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace tt {

void name_this_thread(const char* name) noexcept {
#if defined(__linux__)
  const std::string kept(name, std::min<std::size_t>(std::strlen(name), 15));
  pthread_setname_np(pthread_self(), kept.c_str());
#else
  (void)name;
#endif
}

}  // namespace tt

// Tests that the core's threads carry names: the I/O engine's and the executor's.
#include "tt/common/thread_name.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tt/storage/io_engine.h"

namespace tt {
namespace {

// How many of this process's threads are named `name`.
int threads_named(const std::string& name) {
  int count = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    std::getline(comm, line);
    count += line == name;
  }
  return count;
}

TEST(ThreadNameTest, NamesTheCallingThreadKeepingFifteenCharacters) {
  std::thread([] {
    name_this_thread("tt-a-name-longer-than-fifteen");
    EXPECT_EQ(threads_named("tt-a-name-longe"), 1);
  }).join();
}

// Waits up to a second for `count` threads named `name`: a thread names itself as it starts,
// and a joined one stays listed in /proc until the kernel has reaped it.
int threads_named_once(const std::string& name, int count) {
  for (int tries = 0; threads_named(name) != count && tries < 1000; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return threads_named(name);
}

TEST(ThreadNameTest, EveryIoThreadIsNamed) {
  const int before = threads_named("tt-io");
  {
    IoEngineOptions options;
    options.threads = 3;
    IoEngine engine(options);
    EXPECT_EQ(threads_named_once("tt-io", before + 3), before + 3);
  }
  EXPECT_EQ(threads_named_once("tt-io", before), before);
}

}  // namespace
}  // namespace tt

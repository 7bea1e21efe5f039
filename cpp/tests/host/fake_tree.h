// Test helper shared by the host probe tests: a throwaway directory tree standing in for /proc, /sys and cgroupfs.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "tt/host/probe_roots.h"

namespace tt::test {

// A unique temporary directory, removed with everything in it on destruction.
class FakeTree {
 public:
  FakeTree() {
    static std::atomic<int> counter{0};
    root_ = std::filesystem::temp_directory_path() /
            ("tt_host_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(root_);
  }
  FakeTree(const FakeTree&) = delete;
  FakeTree& operator=(const FakeTree&) = delete;
  ~FakeTree() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }

  // Writes `contents` to `relative` under the root, creating parent directories.
  void write(const std::string& relative, const std::string& contents) const {
    const std::filesystem::path file = root_ / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << contents;
  }

  // Creates the directory `relative` (and its parents) without files in it.
  void make_directory(const std::string& relative) const { std::filesystem::create_directories(root_ / relative); }

  // Absolute path of `relative` under the root.
  std::string path(const std::string& relative = "") const { return (root_ / relative).string(); }

  // Roots pointing at "proc", "sys" and "cgroup" under this tree.
  ProbeRoots roots() const { return ProbeRoots{path("proc"), path("sys"), path("cgroup")}; }

 private:
  std::filesystem::path root_;
};

}  // namespace tt::test

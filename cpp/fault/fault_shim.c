// An LD_PRELOAD shim that makes the Nth file operation under one folder fail, for the
// fault sweeps of tests/e2e/test_fault_sweep.py (built by `make fault-shim`).
//
// Counted: open/openat (any flags), read/pread/write/pwrite, fsync/fdatasync,
// rename/renameat/renameat2, fallocate/posix_fallocate, on paths under TT_FAULT_DIR (a
// descriptor's path is read from /proc/self/fd). Settings, from the environment:
//   TT_FAULT_DIR    the folder whose files count (unset: the shim does nothing)
//   TT_FAULT_AT     the call, counting from 1, that fails (0 or unset: none; only count)
//   TT_FAULT_ERRNO  "EIO" (default) or "ENOSPC"
//   TT_FAULT_COUNT  a file where the number of counted calls is written at exit
// The failing call returns -1 with that errno and does nothing; every other call is the
// libc one. One fault per arming, so that the caller's retry runs clean. A process sweeps
// without restarting by calling tt_fault_arm(N) (ctypes) before each try: the count starts
// again from 0 and the Nth call fails; tt_fault_count() says how many calls were counted.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static const char* folder;
static size_t folder_length;
static atomic_long fail_at;
static int fail_errno = EIO;
static atomic_long counted;
static __thread int inside;  // a call the shim makes itself (readlink, the count file) is not counted

__attribute__((constructor)) static void configure(void) {
  folder = getenv("TT_FAULT_DIR");
  folder_length = folder ? strlen(folder) : 0;
  const char* at = getenv("TT_FAULT_AT");
  atomic_store(&fail_at, at ? atol(at) : 0);
  const char* code = getenv("TT_FAULT_ERRNO");
  if (code && strcmp(code, "ENOSPC") == 0) fail_errno = ENOSPC;
}

void tt_fault_arm(long at) {
  atomic_store(&counted, 0);
  atomic_store(&fail_at, at);
}

long tt_fault_count(void) { return atomic_load(&counted); }

__attribute__((destructor)) static void report(void) {
  const char* path = getenv("TT_FAULT_COUNT");
  if (!path) return;
  inside = 1;
  FILE* out = fopen(path, "w");
  if (out) {
    fprintf(out, "%ld\n", atomic_load(&counted));
    fclose(out);
  }
}

static int under_folder(const char* path) {
  return folder && path && strncmp(path, folder, folder_length) == 0 &&
         (path[folder_length] == '/' || path[folder_length] == '\0');
}

static int fd_under_folder(int fd) {
  if (!folder || fd < 0) return 0;
  char link[64], target[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  inside = 1;
  const ssize_t length = readlink(link, target, sizeof target - 1);
  inside = 0;
  if (length <= 0) return 0;
  target[length] = '\0';
  return under_folder(target);
}

// Whether this counted call is the one to fail (and sets errno if so).
static int fails(int counts) {
  if (!counts || inside) return 0;
  const long call = atomic_fetch_add(&counted, 1) + 1;
  if (call != atomic_load(&fail_at)) return 0;
  errno = fail_errno;
  return 1;
}

#define REAL(name)                     \
  static __typeof__(&name) real_##name; \
  if (!real_##name) real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

static mode_t mode_of(int flags, va_list args) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(args, int) : 0;
}

// The libc functions, each as a wrapper that counts the call and may fail it. Their
// signatures come in a few shapes; one macro per shape.
#define MODE_AFTER(flags) \
  ({ va_list args; va_start(args, flags); const mode_t mode = mode_of(flags, args); va_end(args); mode; })
#define WRAP_OPEN(name)                                               \
  int name(const char* path, int flags, ...) {                        \
    REAL(name);                                                       \
    const mode_t mode = MODE_AFTER(flags);                            \
    return fails(under_folder(path)) ? -1 : real_##name(path, flags, mode); \
  }
#define WRAP_OPENAT(name)                                                          \
  int name(int directory, const char* path, int flags, ...) {                      \
    REAL(name);                                                                    \
    const mode_t mode = MODE_AFTER(flags);                                         \
    return fails(under_folder(path)) ? -1 : real_##name(directory, path, flags, mode); \
  }
#define WRAP_STREAM(name, buffer_type)                         \
  ssize_t name(int fd, buffer_type buffer, size_t count) {     \
    REAL(name);                                                \
    if (fails(fd_under_folder(fd))) return -1;                 \
    return real_##name(fd, buffer, count);                     \
  }
#define WRAP_POSITIONED(name, buffer_type)                                   \
  ssize_t name(int fd, buffer_type buffer, size_t count, off_t offset) {     \
    REAL(name);                                                              \
    if (fails(fd_under_folder(fd))) return -1;                               \
    return real_##name(fd, buffer, count, offset);                           \
  }
#define WRAP_SYNC(name)                          \
  int name(int fd) {                             \
    REAL(name);                                  \
    if (fails(fd_under_folder(fd))) return -1;   \
    return real_##name(fd);                      \
  }

WRAP_OPEN(open)
WRAP_OPEN(open64)
WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)
WRAP_STREAM(read, void*)
WRAP_STREAM(write, const void*)
WRAP_POSITIONED(pread, void*)
WRAP_POSITIONED(pread64, void*)
WRAP_POSITIONED(pwrite, const void*)
WRAP_POSITIONED(pwrite64, const void*)
WRAP_SYNC(fsync)
WRAP_SYNC(fdatasync)

int rename(const char* from, const char* to) {
  REAL(rename);
  if (fails(under_folder(from) || under_folder(to))) return -1;
  return real_rename(from, to);
}

int renameat(int from_directory, const char* from, int to_directory, const char* to) {
  REAL(renameat);
  if (fails(under_folder(from) || under_folder(to))) return -1;
  return real_renameat(from_directory, from, to_directory, to);
}

int renameat2(int from_directory, const char* from, int to_directory, const char* to, unsigned int flags) {
  REAL(renameat2);
  if (fails(under_folder(from) || under_folder(to))) return -1;
  return real_renameat2(from_directory, from, to_directory, to, flags);
}

int fallocate(int fd, int mode, off_t offset, off_t length) {
  REAL(fallocate);
  if (fails(fd_under_folder(fd))) return -1;
  return real_fallocate(fd, mode, offset, length);
}

int posix_fallocate(int fd, off_t offset, off_t length) {
  REAL(posix_fallocate);
  if (fails(fd_under_folder(fd))) return errno;  // returns the error instead of setting errno
  return real_posix_fallocate(fd, offset, length);
}

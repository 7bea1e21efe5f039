// Calling Python kernels from native threads: owning the callable, and one thread state per worker.
#pragma once

#include <nanobind/nanobind.h>

namespace tt::bindings {

// Owns a reference to the Python kernel. Workers share it through the run, and the last
// owner may be a worker thread that does not hold the GIL, so the release takes it.
struct PythonKernel {
  explicit PythonKernel(nanobind::callable fn) : fn(std::move(fn)) {}
  ~PythonKernel() {
    nanobind::gil_scoped_acquire gil;
    fn.reset();
  }
  nanobind::callable fn;
};

inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// Gives a pool worker one Python thread state for its whole life. Without it, each
// gil_scoped_acquire on a thread Python does not know creates and destroys a thread
// state: most of the cost of a kernel call, and thread-local Python state (threading.local)
// would not survive from one region to the next. The state is registered with PyGILState,
// so later acquisitions, ours or torch's, find and reuse it. Threads Python already knows
// (the caller's) are left alone.
class PersistentThreadState {
 public:
  PersistentThreadState() {
    if (PyGILState_GetThisThreadState() != nullptr) return;
    gil_state_ = PyGILState_Ensure();
    saved_ = PyEval_SaveThread();
  }

  // Runs when the worker thread exits (the executor joins it with the GIL released).
  ~PersistentThreadState() {
    if (saved_ == nullptr || interpreter_finalizing()) return;  // at shutdown, leave it to the OS
    PyEval_RestoreThread(saved_);
    PyGILState_Release(gil_state_);
  }

 private:
  PyGILState_STATE gil_state_{};
  PyThreadState* saved_ = nullptr;
};

inline void keep_python_thread_state() { thread_local PersistentThreadState state; }

}  // namespace tt::bindings

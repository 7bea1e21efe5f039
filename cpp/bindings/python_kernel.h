// Calling Python kernels from native threads: owning the callable, and one thread state per worker.
#pragma once

#include <nanobind/nanobind.h>

namespace tt::bindings {

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
    started_by_core() = true;
  }

  // Whether this thread's Python state is one we made: the thread is a pool worker.
  static bool& started_by_core() {
    thread_local bool started = false;
    return started;
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

// A thread the core started (a pool worker, an I/O or timer thread), not one of Python's.
inline bool on_core_thread() {
  return PersistentThreadState::started_by_core() || PyGILState_GetThisThreadState() == nullptr;
}

// Owns a reference to the Python kernel. Workers share it through the run, and the last
// owner may be any thread: the caller once the run is over, but after a stall the worker
// (or I/O or timer thread) that finishes the stuck instruction. Releasing the callable
// there could run any destructor, even that of the executor or plane this very thread
// belongs to (a bound method of an object that holds it), so a thread the core started
// hands the release to Python's main thread.
struct PythonKernel {
  explicit PythonKernel(nanobind::callable fn) : fn(std::move(fn)) {}
  ~PythonKernel() {
    if (interpreter_finalizing()) {
      fn.release();  // at shutdown nothing may run: leave it to the OS
      return;
    }
    if (on_core_thread()) {
      PyObject* object = fn.release().ptr();
      if (Py_AddPendingCall(&release_later, object) == 0) return;
      fn = nanobind::steal<nanobind::callable>(object);  // Python's queue is full: release it here
    }
    nanobind::gil_scoped_acquire gil;
    fn.reset();
  }
  static int release_later(void* object) {
    Py_DECREF(static_cast<PyObject*>(object));
    return 0;
  }
  nanobind::callable fn;
};

}  // namespace tt::bindings

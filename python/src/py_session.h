// Sessions as the bindings hold them: PySession (the Python Session's _s),
// for the local Session and the ClusterSession alike.
// Thread-safety: its methods take the GIL-holding caller's reference to the
// session and release the GIL while a step (or a close) waits, so several
// Python threads may run steps at once.
#pragma once

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "python/src/common.h"
#include "shardflow/session.h"

namespace sf {
namespace python {

struct PySession {
  // Shared with the steps in flight: a close() from one Python thread while
  // another runs a step leaves the session to the last of them.
  std::shared_ptr<SessionInterface> s;
  py::object graph;  // keeps the PyGraph alive while the session runs it

  // A reference for one call (taken with the GIL held).
  std::shared_ptr<SessionInterface> S() {
    if (!s) throw StatusError(FailedPrecondition("the session is closed"));
    return s;
  }
  // Stops the session (idempotent); see SessionInterface::CancelWaits.
  void Close();
  ~PySession();

  // Runs one step (with a trace written to trace_file unless it is "");
  // raises the step's error as its sf.errors class.
  std::vector<py::array> Run(const std::vector<std::tuple<std::string, py::array, int>>& feeds,
                             const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                             const std::string& trace_file, int64_t trace_max_events);
  // Runs one step of sess (S()'s reference, which it drops) with the GIL
  // released; returns one array per fetch (a fetched feed copied, so that it
  // does not alias the caller's array) or raises the step's error.
  static std::vector<py::array> Step(std::shared_ptr<SessionInterface> sess, FeedMap feeds, const Fetches& fetches,
                                     const Targets& targets, const RunOptions& options);
};

}  // namespace python
}  // namespace sf

// What this process has used so far, all threads together (getrusage): the
// benches report CPU time and thread switches per step beside wall time,
// because on a shared VM the wall time of a step moves with the neighbours'
// load far more than the work it does.
#pragma once

#include <sys/resource.h>

namespace sf::bench {

struct ProcessUsage {
  double cpu_seconds = 0;       // user + system
  double context_switches = 0;  // voluntary (a thread slept) + involuntary (preempted)
};

// The process's usage now; zeros if getrusage fails (it cannot for RUSAGE_SELF).
inline ProcessUsage ReadProcessUsage() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return {};
  ProcessUsage p;
  p.cpu_seconds = u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  p.context_switches = static_cast<double>(u.ru_nvcsw + u.ru_nivcsw);
  return p;
}

}  // namespace sf::bench

// What this process has used so far, all threads together (getrusage): the
// benches report CPU time and thread switches per step beside wall time,
// because on a shared VM the wall time of a step moves with the neighbours'
// load far more than the work it does.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

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

// Another process's usage now, from /proc/PID/stat (CPU in clock ticks,
// 10 ms here: time enough work) and each thread's switches from
// /proc/PID/task/*/status; zeros once the process is gone.
inline ProcessUsage ReadProcessUsage(pid_t pid) {
  ProcessUsage p;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the name may hold spaces
  if (close == std::string::npos) return p;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && (fields >> f); ++i) {  // field 3 is the state
    if (i == 14) utime = std::stod(f);
    if (i == 15) stime = std::stod(f);
  }
  p.cpu_seconds = (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 || line.rfind("nonvoluntary_ctxt_switches:", 0) == 0)
        p.context_switches += std::stod(line.substr(line.find(':') + 1));
  }
  return p;
}

}  // namespace sf::bench

#include "runtime/trace_json.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

namespace sf {
namespace runtime {

namespace {

// Tids of lanes start here, past any thread row.
constexpr int kFirstLaneTid = 1000;

void AppendEscaped(std::string* out, const std::string& s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\t': *out += "\\t"; break;
      case '\r': *out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

// Nanoseconds as microseconds with three decimals (exact, no rounding).
void AppendMicros(std::string* out, int64_t ns) {
  char buf[32];
  const char* sign = ns < 0 ? "-" : "";
  const uint64_t a = ns < 0 ? static_cast<uint64_t>(-(ns + 1)) + 1 : static_cast<uint64_t>(ns);
  std::snprintf(buf, sizeof buf, "%s%llu.%03llu", sign, static_cast<unsigned long long>(a / 1000),
                static_cast<unsigned long long>(a % 1000));
  *out += buf;
}

// Events of one process on one clock, their threads by name.
struct Process {
  std::string name;
  int64_t dropped = 0;
  std::vector<std::string> threads;  // tid = index + 1
  struct Ev {
    const TraceEvent* e;
    int64_t start_ns;
    int tid;
  };
  std::vector<Ev> events;

  int ThreadTid(const std::string& thread) {
    auto it = std::find(threads.begin(), threads.end(), thread);
    if (it != threads.end()) return static_cast<int>(it - threads.begin()) + 1;
    threads.push_back(thread);
    return static_cast<int>(threads.size());
  }
  void Add(const TraceData& d, int64_t offset_ns) {
    dropped += d.dropped;
    std::vector<int> tids;
    for (const std::string& t : d.threads) tids.push_back(ThreadTid(t));
    for (const TraceEvent& e : d.events)
      events.push_back(Ev{&e, e.start_ns + offset_ns, e.thread < tids.size() ? tids[e.thread] : 0});
  }
};

bool IsSpan(const std::string& category) {
  return category == "wait" || category == "partition" || category == "step";
}

std::string LaneName(const std::string& category) {
  if (category == "wait") return "waits";
  if (category == "partition") return "partitions";
  return category;
}

void AppendMeta(std::string* out, const char* what, int pid, int tid, const std::string& name) {
  *out += "{\"name\":\"";
  *out += what;
  *out += "\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
          ",\"args\":{\"name\":";
  AppendEscaped(out, name);
  *out += "}},\n";
}

}  // namespace

std::string ChromeTraceJson(const std::string& process, const TraceData& local,
                            const std::vector<RemoteTrace>& remote) {
  std::vector<Process> procs(1);
  procs[0].name = process;
  procs[0].Add(local, 0);
  for (const RemoteTrace& r : remote) {
    auto it = std::find_if(procs.begin(), procs.end(), [&](const Process& p) { return p.name == r.process; });
    if (it == procs.end()) {
      procs.emplace_back();
      procs.back().name = r.process;
      it = procs.end() - 1;
    }
    it->Add(r.data, r.offset_ns);
  }

  std::string out = "{\"displayTimeUnit\":\"ns\",\n\"traceEvents\":[\n";
  int64_t dropped = 0;
  for (size_t p = 0; p < procs.size(); ++p) {
    Process& proc = procs[p];
    const int pid = static_cast<int>(p) + 1;
    dropped += proc.dropped;
    AppendMeta(&out, "process_name", pid, 0, proc.name);
    out += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
           ",\"tid\":0,\"args\":{\"sort_index\":" + std::to_string(pid) + "}},\n";
    if (proc.dropped > 0)
      AppendMeta(&out, "process_labels", pid, 0, std::to_string(proc.dropped) + " events dropped (trace_max_events)");
    for (size_t t = 0; t < proc.threads.size(); ++t)
      AppendMeta(&out, "thread_name", pid, static_cast<int>(t) + 1, proc.threads[t]);
    std::stable_sort(proc.events.begin(), proc.events.end(),
                     [](const Process::Ev& a, const Process::Ev& b) { return a.start_ns < b.start_ns; });
    // Spans go on lanes: the first lane of their kind free at their start.
    struct Lane {
      std::string kind;
      int64_t end_ns;
      int tid;
    };
    std::vector<Lane> lanes;
    std::map<std::string, int> lanes_of_kind;
    for (Process::Ev& ev : proc.events) {
      const std::string& cat = ev.e->category;
      if (!IsSpan(cat)) continue;
      const std::string kind = LaneName(cat);
      Lane* free = nullptr;
      for (Lane& l : lanes)
        if (l.kind == kind && l.end_ns <= ev.start_ns) {
          free = &l;
          break;
        }
      if (!free) {
        const int tid = kFirstLaneTid + static_cast<int>(lanes.size());
        const int n = ++lanes_of_kind[kind];
        lanes.push_back(Lane{kind, 0, tid});
        free = &lanes.back();
        AppendMeta(&out, "thread_name", pid, tid, kind == "step" ? kind : kind + " " + std::to_string(n));
        out += "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
               ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"sort_index\":" + std::to_string(-tid) + "}},\n";
      }
      free->end_ns = ev.start_ns + ev.e->dur_ns;
      ev.tid = free->tid;
    }
    for (const Process::Ev& ev : proc.events) {
      out += "{\"name\":";
      AppendEscaped(&out, ev.e->name);
      out += ",\"cat\":";
      AppendEscaped(&out, ev.e->category);
      out += ",\"ph\":\"X\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(ev.tid) + ",\"ts\":";
      AppendMicros(&out, ev.start_ns);
      out += ",\"dur\":";
      AppendMicros(&out, ev.e->dur_ns);
      if (!ev.e->op.empty()) {
        out += ",\"args\":{\"op\":";
        AppendEscaped(&out, ev.e->op);
        out += "}";
      }
      out += "},\n";
    }
  }
  // Every element above ends with ",\n"; JSON wants none after the last.
  if (out.size() >= 2 && out[out.size() - 2] == ',') out.erase(out.size() - 2, 1);
  out += "],\n\"droppedEvents\":" + std::to_string(dropped) + "}\n";
  return out;
}

Status WriteChromeTrace(const std::string& path, const std::string& process, StepTrace* trace) {
  auto [local, remote] = trace->Take();
  const std::string json = ChromeTraceJson(process, local, remote);
  // Written beside and renamed, so a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Unavailable("cannot write the trace file " + path + ": " + std::strerror(errno));
  const bool wrote = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    return Unavailable("cannot write the trace file " + path + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return Unavailable("cannot write the trace file " + path + ": " + why);
  }
  return Status::OK();
}

}  // namespace runtime
}  // namespace sf

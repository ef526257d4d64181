// Reads a step's Chrome trace file (RunOptions::trace_file) for tests: its
// complete events, process and thread names and dropped count, and checks
// what every trace must hold whatever the step: valid JSON, each "X" event
// with ts >= 0 (the step's start) and dur >= 0 on a named process and
// thread, and the events of each row nested (an event starts after the one
// before it ended, or ends inside it), which Perfetto needs to draw them.
#pragma once

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/json_value.h"

namespace sf::testing {

struct TraceFileEvent {
  std::string name, cat, op;
  int pid = 0, tid = 0;
  double ts = 0, dur = 0;  // microseconds
};

struct TraceFile {
  std::vector<TraceFileEvent> events;                   // the "X" events
  std::map<int, std::string> processes;                 // pid -> process_name
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> thread_name
  double dropped = -1;                                  // "droppedEvents"

  // The events of category cat (all of them for "").
  std::vector<TraceFileEvent> Of(const std::string& cat) const {
    std::vector<TraceFileEvent> out;
    for (const auto& e : events)
      if (cat.empty() || e.cat == cat) out.push_back(e);
    return out;
  }
  // The names of the op events (every category but the spans).
  std::set<std::string> OpNames() const {
    std::set<std::string> out;
    for (const auto& e : events)
      if (e.cat != "wait" && e.cat != "partition" && e.cat != "step") out.insert(e.name);
    return out;
  }
};

// Reads and checks path; "" and the trace in *out, or what is wrong.
inline std::string ReadTraceFile(const std::string& path, TraceFile* out) {
  std::ifstream f(path);
  if (!f) return "cannot open " + path;
  std::stringstream ss;
  ss << f.rdbuf();
  JsonValue root;
  std::string err;
  if (!ParseJson(ss.str(), &root, &err)) return path + " is not JSON: " + err;
  const JsonValue* events = root.Find("traceEvents");
  if (!events || events->kind != JsonValue::kArray) return "no traceEvents array";
  out->dropped = root.Num("droppedEvents");
  for (const JsonValue& e : events->arr) {
    const std::string ph = e.Str("ph");
    const int pid = static_cast<int>(e.Num("pid")), tid = static_cast<int>(e.Num("tid"));
    if (ph == "M") {
      const JsonValue* args = e.Find("args");
      if (e.Str("name") == "process_name" && args) out->processes[pid] = args->Str("name");
      if (e.Str("name") == "thread_name" && args) out->threads[{pid, tid}] = args->Str("name");
      continue;
    }
    if (ph != "X") return "an event of phase '" + ph + "'";
    TraceFileEvent x;
    x.name = e.Str("name");
    x.cat = e.Str("cat");
    if (const JsonValue* args = e.Find("args")) x.op = args->Str("op");
    x.pid = pid;
    x.tid = tid;
    x.ts = e.Num("ts");
    x.dur = e.Num("dur");
    if (x.name.empty() || x.cat.empty()) return "an X event without name or cat";
    if (x.ts < 0 || x.dur < 0) return "event " + x.name + " has ts " + std::to_string(x.ts) + ", dur " +
                                      std::to_string(x.dur);
    out->events.push_back(std::move(x));
  }
  std::map<std::pair<int, int>, std::vector<const TraceFileEvent*>> rows;
  for (const auto& e : out->events) {
    if (!out->processes.count(e.pid)) return "event " + e.name + " is on an unnamed process " + std::to_string(e.pid);
    if (!out->threads.count({e.pid, e.tid}))
      return "event " + e.name + " is on an unnamed thread " + std::to_string(e.tid);
    rows[{e.pid, e.tid}].push_back(&e);
  }
  constexpr double kSlack = 0.0015;  // the file's microseconds have three decimals
  for (auto& [row, evs] : rows) {
    std::stable_sort(evs.begin(), evs.end(), [](auto* a, auto* b) { return a->ts < b->ts; });
    std::vector<const TraceFileEvent*> open;  // enclosing events, innermost last
    for (const TraceFileEvent* e : evs) {
      while (!open.empty() && open.back()->ts + open.back()->dur <= e->ts + kSlack) open.pop_back();
      if (!open.empty() && e->ts + e->dur > open.back()->ts + open.back()->dur + kSlack)
        return "events " + open.back()->name + " and " + e->name + " overlap on thread " +
               out->threads[row] + " without nesting";
      open.push_back(e);
    }
  }
  return "";
}

}  // namespace sf::testing

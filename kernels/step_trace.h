// StepTrace: the timeline of one step, recorded when a run asks for it
// (RunOptions::trace_file). The executor adds one event per op it runs (on
// the thread that ran it), one "wait" event per asynchronous op (from its
// start to its answer: a Recv waiting for its tensor, a dequeue from an
// empty queue, a variable or embedding shard's reply), and the partition
// host one "partition" span per partition; the coordinator adds the step.
// Events from other processes (the nodes of a cluster step) come back as
// TraceData and are added with the offset that puts them on this trace's
// clock. runtime/trace_json.h writes it all as Chrome trace-event JSON.
//
// Memory is bounded: past max_events the trace keeps counting but stores
// nothing more (TraceData::dropped). Times are nanoseconds on the steady
// clock since the trace's origin (its construction).
// Thread-safety: every method may be called from many threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace sf {

// One complete event. category is one of "op", "send", "recv", "variable",
// "embedding", "queue" (an op, by what it does), "wait" (an asynchronous
// op's wait for its answer), "partition" or "step" (spans).
struct TraceEvent {
  std::string name;      // the node's name, a partition's device, "step"
  std::string op;        // the node's op ("" for spans)
  std::string category;
  uint32_t thread = 0;   // index into TraceData::threads
  int64_t start_ns = 0;  // since the trace's origin
  int64_t dur_ns = 0;
};

// What one process recorded for a step.
struct TraceData {
  std::vector<TraceEvent> events;
  std::vector<std::string> threads;  // the name of each thread events name
  int64_t dropped = 0;               // events past the cap, not stored
};

// Another process's events, with where they sit on this trace's clock.
struct RemoteTrace {
  std::string process;  // e.g. "node n1 (127.0.0.1:7001)"
  int64_t offset_ns = 0;  // added to every start_ns of data
  TraceData data;
};

// The default and the largest cap on events per step and process.
constexpr int64_t kDefaultTraceEvents = 100000;
constexpr int64_t kMaxTraceEvents = 1 << 22;

class StepTrace {
 public:
  // A trace whose origin is now, keeping at most max_events events (clamped
  // to [0, kMaxTraceEvents]).
  explicit StepTrace(int64_t max_events = kDefaultTraceEvents)
      : origin_(Clock()), max_events_(max_events < 0 ? 0 : max_events > kMaxTraceEvents ? kMaxTraceEvents : max_events) {}

  // The steady clock in nanoseconds (the events' clock, before the origin
  // is subtracted).
  static int64_t Clock() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Nanoseconds since the origin.
  int64_t Now() const { return Clock() - origin_; }
  int64_t max_events() const { return max_events_; }

  // Records an event on the calling thread, from start_ns to end_ns (both
  // since the origin); counted as dropped past the cap.
  void Add(const std::string& name, const std::string& op, const char* category, int64_t start_ns, int64_t end_ns) {
    const uint32_t tid = ThreadId();
    std::lock_guard<std::mutex> l(mu_);
    if (static_cast<int64_t>(data_.events.size()) >= max_events_) {
      ++data_.dropped;
      return;
    }
    data_.events.push_back(TraceEvent{name, op, category, ThreadIndex(tid), start_ns,
                                      end_ns > start_ns ? end_ns - start_ns : 0});
  }
  // Adds another process's events for this step.
  void AddRemote(RemoteTrace remote) {
    std::lock_guard<std::mutex> l(mu_);
    remote_.push_back(std::move(remote));
  }
  // Takes what was recorded here, and the other processes' events.
  std::pair<TraceData, std::vector<RemoteTrace>> Take() {
    std::lock_guard<std::mutex> l(mu_);
    tids_.clear();
    return {std::exchange(data_, TraceData{}), std::exchange(remote_, {})};
  }

 private:
  // A small id per thread of the process, the same in every trace, so that
  // events of one process recorded by several traces (partitions) land on
  // one row per thread when merged. The counter is the only process-wide
  // state, and only tracing threads draw from it.
  static uint32_t ThreadId() {
    static std::atomic<uint32_t> next{0};
    thread_local uint32_t id = next.fetch_add(1);
    return id;
  }
  uint32_t ThreadIndex(uint32_t tid) {  // REQUIRES: mu_
    for (size_t i = 0; i < tids_.size(); ++i)
      if (tids_[i] == tid) return static_cast<uint32_t>(i);
    tids_.push_back(tid);
    data_.threads.push_back("thread " + std::to_string(tid));
    return static_cast<uint32_t>(tids_.size() - 1);
  }

  const int64_t origin_;
  const int64_t max_events_;
  std::mutex mu_;
  TraceData data_;                   // GUARDED_BY(mu_)
  std::vector<uint32_t> tids_;       // GUARDED_BY(mu_), by data_.threads index
  std::vector<RemoteTrace> remote_;  // GUARDED_BY(mu_)
};

}  // namespace sf

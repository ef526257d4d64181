// A step's trace (kernels/step_trace.h) as Chrome trace-event JSON: the
// {"traceEvents": [...]} object Perfetto (https://ui.perfetto.dev) and
// chrome://tracing open. Each process is one pid with a "process_name"
// metadata event (this process first, then each node of a cluster step);
// each thread that ran ops is one tid with a "thread_name" event; an op is a
// complete ("X") event with ts and dur in microseconds since the step's
// start at the coordinator, cat its category and args.op its op. Spans that
// overlap the ops of the threads they start on (asynchronous waits,
// partitions, the step) go on lanes of their own ("waits 1", "partitions
// 1", "step"), one lane per span in flight, so every row nests properly.
// "droppedEvents" counts the events past the cap (all processes).
#pragma once

#include <string>
#include <vector>

#include "kernels/step_trace.h"
#include "shardflow/status.h"

namespace sf {
namespace runtime {

// The JSON of one step: local (named process) and the remote processes'
// events, each shifted by its offset.
std::string ChromeTraceJson(const std::string& process, const TraceData& local,
                            const std::vector<RemoteTrace>& remote);

// Takes trace's events and writes them to path as ChromeTraceJson (the
// file is replaced); Unavailable naming path when it cannot be written.
Status WriteChromeTrace(const std::string& path, const std::string& process, StepTrace* trace);

}  // namespace runtime
}  // namespace sf

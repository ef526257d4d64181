#include "examples/common/trace.h"

namespace sf::examples {

void DeclareTraceFlags(Flags& flags) {
  flags.String("trace", "", "write one training step's timeline to FILE (Chrome trace-event JSON, for Perfetto)")
      .Int("trace-step", 10, "the training step --trace records (counted from 0)");
}

TraceFlag::TraceFlag(const Flags& flags) : file_(flags.GetString("trace")), step_(flags.GetInt("trace-step")) {}

RunOptions TraceFlag::For(int64_t step) const {
  RunOptions o;
  if (file_.empty() || step != step_) return o;
  o.trace_file = file_;
  return o;
}

}  // namespace sf::examples

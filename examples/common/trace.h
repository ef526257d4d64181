// --trace FILE for the examples: the timeline of one training step as Chrome
// trace-event JSON (shardflow/run_args.h RunOptions::trace_file), the step
// chosen with --trace-step (default 10: past the first steps, whose plans are
// still being built). A program declares the flags with DeclareTraceFlags and
// asks TraceFlag::For(step) for each training step's RunOptions.
#pragma once

#include <cstdint>
#include <string>

#include "examples/common/flags.h"
#include "shardflow/run_args.h"

namespace sf::examples {

// Declares --trace FILE and --trace-step N.
void DeclareTraceFlags(Flags& flags);

class TraceFlag {
 public:
  // Reads the flags DeclareTraceFlags declared.
  explicit TraceFlag(const Flags& flags);
  // The options of training step `step` (counted from 0): the trace file on
  // the traced step, nothing on the others.
  RunOptions For(int64_t step) const;

 private:
  std::string file_;
  int64_t step_ = 10;
};

}  // namespace sf::examples

// Device names: "/job:J/task:T/device:CPU:N" (or GPU:N), as in TensorFlow.
//
// Any field may be missing (or "*") in a partial name, which then matches
// every value of that field: "/job:worker" is any device of any worker task,
// "/device:GPU:*" any GPU. The legacy shorthand "/cpu:0" and "/gpu:1" means
// "/device:CPU:0" and "/device:GPU:1". Device types are case-insensitive on
// input and printed upper-case. A replica field is not supported.
// Thread-safety: values and pure functions.
#pragma once

#include <string>

#include "shardflow/status.h"

namespace sf {

struct DeviceName {
  bool has_job = false;
  std::string job;
  bool has_task = false;
  int task = 0;
  bool has_type = false;
  std::string type;  // "CPU" or "GPU"
  bool has_id = false;
  int id = 0;

  // True when job, task, type and id are all set (a device, not a pattern).
  bool fully_defined() const { return has_job && has_task && has_type && has_id; }
  // The canonical form, omitting missing fields ("" for a fully wildcard
  // name; "/device:CPU:*" for a type without an id).
  std::string ToString() const;
  bool operator==(const DeviceName& o) const;
  bool operator!=(const DeviceName& o) const { return !(*this == o); }
};

// Parses a full or partial device name; "" is the fully wildcard name.
// InvalidArgument quoting the text and the part that is wrong.
Result<DeviceName> ParseDeviceName(const std::string& text);

// Parses a name that must be fully defined; InvalidArgument quoting it when
// it is malformed or a field is missing (the error names the field).
Result<DeviceName> ParseFullDeviceName(const std::string& text);

// The canonical form of `text` ("/cpu:0" -> "/device:CPU:0"); InvalidArgument
// as for ParseDeviceName.
Result<std::string> CanonicalDeviceName(const std::string& text);

// True when every field set in `pattern` has the same value in `device`
// (fields missing from `device` match only a pattern that omits them too).
bool DeviceNameMatches(const DeviceName& pattern, const DeviceName& device);

// The most specific name satisfying both `a` and `b` (fields of either);
// InvalidArgument naming both names and the field when they disagree.
Result<DeviceName> MergeDeviceNames(const DeviceName& a, const DeviceName& b);

}  // namespace sf

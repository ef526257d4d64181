#include "graph/device_name.h"

#include <cctype>
#include <vector>

namespace sf {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t p; (p = s.find(sep, start)) != std::string::npos; start = p + 1)
    out.push_back(s.substr(start, p - start));
  out.push_back(s.substr(start));
  return out;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// A non-negative decimal that fits an int comfortably.
bool ParseIndex(const std::string& s, int* out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  *out = std::stoi(s);
  return true;
}

bool ValidJob(const std::string& s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

Status Bad(const std::string& text, const std::string& why) {
  return InvalidArgument("bad device name '" + text + "': " + why +
                         " (expected /job:NAME/task:N/device:CPU:N or GPU:N, any part optional)");
}

}  // namespace

std::string DeviceName::ToString() const {
  std::string s;
  if (has_job) s += "/job:" + job;
  if (has_task) s += "/task:" + std::to_string(task);
  if (has_type || has_id)
    s += "/device:" + (has_type ? type : std::string("*")) + ":" + (has_id ? std::to_string(id) : "*");
  return s;
}

bool DeviceName::operator==(const DeviceName& o) const {
  return has_job == o.has_job && (!has_job || job == o.job) && has_task == o.has_task &&
         (!has_task || task == o.task) && has_type == o.has_type && (!has_type || type == o.type) &&
         has_id == o.has_id && (!has_id || id == o.id);
}

Result<DeviceName> ParseDeviceName(const std::string& text) {
  DeviceName d;
  if (text.empty()) return d;
  if (text[0] != '/') return Bad(text, "it must start with '/'");
  bool seen_job = false, seen_task = false, seen_device = false;
  for (const std::string& part : Split(text.substr(1), '/')) {
    if (part.empty()) return Bad(text, "empty part between '/'");
    std::vector<std::string> f = Split(part, ':');
    const std::string key = f[0];
    const std::string lkey = Upper(key);
    if (key == "job" && f.size() == 2) {
      if (seen_job) return Bad(text, "job given twice");
      seen_job = true;
      if (f[1] == "*") continue;
      if (!ValidJob(f[1]))
        return Bad(text, "job '" + f[1] + "' is not a name (letter, then letters, digits, _)");
      d.has_job = true;
      d.job = f[1];
    } else if (key == "task" && f.size() == 2) {
      if (seen_task) return Bad(text, "task given twice");
      seen_task = true;
      if (f[1] == "*") continue;
      if (!ParseIndex(f[1], &d.task)) return Bad(text, "task '" + f[1] + "' is not a non-negative integer");
      d.has_task = true;
    } else if ((key == "device" && (f.size() == 2 || f.size() == 3)) ||
               ((lkey == "CPU" || lkey == "GPU") && f.size() == 2)) {
      if (seen_device) return Bad(text, "device given twice");
      seen_device = true;
      const bool legacy = key != "device";
      const std::string type = Upper(legacy ? key : f[1]);
      const std::string id = legacy ? f[1] : (f.size() == 3 ? f[2] : "*");
      if (type != "*") {
        if (type != "CPU" && type != "GPU")
          return Bad(text, "device type '" + (legacy ? key : f[1]) + "' is not CPU or GPU");
        d.has_type = true;
        d.type = type;
      }
      if (id != "*") {
        if (!ParseIndex(id, &d.id))
          return Bad(text, "device index '" + id + "' is not a non-negative integer");
        d.has_id = true;
      }
    } else {
      return Bad(text, "unknown part '" + part + "'");
    }
  }
  return d;
}

Result<DeviceName> ParseFullDeviceName(const std::string& text) {
  SF_ASSIGN_OR_RETURN(DeviceName d, ParseDeviceName(text));
  const char* missing = !d.has_job ? "job" : !d.has_task ? "task" : !d.has_type ? "device type"
                        : !d.has_id ? "device index" : nullptr;
  if (missing)
    return InvalidArgument("device '" + text + "' is not a full device name: the " + missing +
                           " is missing (expected /job:NAME/task:N/device:CPU:N)");
  return d;
}

Result<std::string> CanonicalDeviceName(const std::string& text) {
  SF_ASSIGN_OR_RETURN(DeviceName d, ParseDeviceName(text));
  return d.ToString();
}

bool DeviceNameMatches(const DeviceName& pattern, const DeviceName& device) {
  if (pattern.has_job && (!device.has_job || device.job != pattern.job)) return false;
  if (pattern.has_task && (!device.has_task || device.task != pattern.task)) return false;
  if (pattern.has_type && (!device.has_type || device.type != pattern.type)) return false;
  if (pattern.has_id && (!device.has_id || device.id != pattern.id)) return false;
  return true;
}

Result<DeviceName> MergeDeviceNames(const DeviceName& a, const DeviceName& b) {
  DeviceName m = a;
  auto conflict = [&](const char* field) {
    return InvalidArgument("device names '" + a.ToString() + "' and '" + b.ToString() +
                           "' conflict: different " + field);
  };
  if (b.has_job) {
    if (m.has_job && m.job != b.job) return conflict("jobs");
    m.has_job = true;
    m.job = b.job;
  }
  if (b.has_task) {
    if (m.has_task && m.task != b.task) return conflict("tasks");
    m.has_task = true;
    m.task = b.task;
  }
  if (b.has_type) {
    if (m.has_type && m.type != b.type) return conflict("device types");
    m.has_type = true;
    m.type = b.type;
  }
  if (b.has_id) {
    if (m.has_id && m.id != b.id) return conflict("device indices");
    m.has_id = true;
    m.id = b.id;
  }
  return m;
}

}  // namespace sf

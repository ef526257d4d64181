// The installed checkpoint hooks (kernels/checkpoint_hooks.h).
#include "kernels/checkpoint_hooks.h"

#include <mutex>

namespace sf {
namespace {
std::mutex& HooksMu() {
  static std::mutex mu;
  return mu;
}
CheckpointHooks& Hooks() {
  static CheckpointHooks* h = new CheckpointHooks();
  return *h;
}
}  // namespace

std::vector<std::string> SplitCheckpointNames(const std::string& joined) {
  std::vector<std::string> out;
  if (joined.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t end = joined.find('\n', start);
    out.push_back(joined.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

void SetCheckpointHooks(CheckpointHooks hooks) {
  std::lock_guard<std::mutex> l(HooksMu());
  Hooks() = std::move(hooks);
}

const CheckpointHooks& GetCheckpointHooks() {
  std::lock_guard<std::mutex> l(HooksMu());
  return Hooks();
}

}  // namespace sf

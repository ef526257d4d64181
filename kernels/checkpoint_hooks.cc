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

void SetCheckpointHooks(CheckpointHooks hooks) {
  std::lock_guard<std::mutex> l(HooksMu());
  Hooks() = std::move(hooks);
}

const CheckpointHooks& GetCheckpointHooks() {
  std::lock_guard<std::mutex> l(HooksMu());
  return Hooks();
}

}  // namespace sf

// StepStacks: the values a while loop's forward half saves for its backward
// half (StackPush / StackPop), owned by the step that runs both. The step's
// executor creates one per step and drops it when the step finishes or
// aborts, so nothing a failed step pushed outlives it.
// An index has one iteration number per loop the push is nested in, so a
// loop inside another loop's body keeps one value per (outer, inner) pair.
// Thread-safety: Push and Pop may be called from many compute threads.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "shardflow/tensor.h"

namespace sf {

class StepStacks {
 public:
  // Saves t under (stack, index), replacing what was there. The index is one
  // iteration number per enclosing loop, outermost first (n of them).
  void Push(const std::string& stack, const int32_t* index, int n, Tensor t) {
    std::string key = Key(stack, index, n);
    std::lock_guard<std::mutex> l(mu_);
    values_[std::move(key)] = std::move(t);
  }
  // Moves the value under (stack, index) into *t and forgets it; false when
  // nothing was pushed there.
  bool Pop(const std::string& stack, const int32_t* index, int n, Tensor* t) {
    const std::string key = Key(stack, index, n);
    std::lock_guard<std::mutex> l(mu_);
    auto it = values_.find(key);
    if (it == values_.end()) return false;
    *t = std::move(it->second);
    values_.erase(it);
    return true;
  }
  // How many values wait to be popped.
  size_t size() const {
    std::lock_guard<std::mutex> l(mu_);
    return values_.size();
  }

 private:
  // The stack name, a NUL (never in a node name) and the index's bytes: one
  // allocation per call, whatever the nesting depth.
  static std::string Key(const std::string& stack, const int32_t* index, int n) {
    std::string key;
    key.reserve(stack.size() + 1 + sizeof(int32_t) * static_cast<size_t>(n));
    key.append(stack).push_back('\0');
    key.append(reinterpret_cast<const char*>(index), sizeof(int32_t) * static_cast<size_t>(n));
    return key;
  }

  mutable std::mutex mu_;
  std::unordered_map<std::string, Tensor> values_;  // GUARDED_BY(mu_)
};

}  // namespace sf

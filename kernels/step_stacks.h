// StepStacks: the values a while loop's forward half saves for its backward
// half (StackPush / StackPop), owned by the step that runs both. The step's
// executor creates one per step and drops it when the step finishes or
// aborts, so nothing a failed step pushed outlives it.
// Thread-safety: Push and Pop may be called from many compute threads.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "shardflow/tensor.h"

namespace sf {

class StepStacks {
 public:
  // Saves t under (stack, index), replacing what was there.
  void Push(const std::string& stack, int32_t index, Tensor t) {
    std::lock_guard<std::mutex> l(mu_);
    values_[{stack, index}] = std::move(t);
  }
  // Moves the value under (stack, index) into *t and forgets it; false when
  // nothing was pushed there.
  bool Pop(const std::string& stack, int32_t index, Tensor* t) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = values_.find({stack, index});
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
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int32_t>, Tensor> values_;  // GUARDED_BY(mu_)
};

}  // namespace sf

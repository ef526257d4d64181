// The checkpoint directory of an example or benchmark: the one the user
// gave, or a fresh temporary one removed when the object goes.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "shardflow/status.h"

namespace sf::examples {

class CheckpointDir {
 public:
  CheckpointDir() = default;
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;
  ~CheckpointDir() {
    std::error_code ec;
    if (temporary_) std::filesystem::remove_all(path_, ec);
  }
  // Uses `given`, or makes "/tmp/<tag>-XXXXXX" when it is empty; Unavailable
  // when the temporary directory cannot be made.
  Status Init(const std::string& given, const std::string& tag) {
    if (!given.empty()) {
      path_ = given;
      return Status::OK();
    }
    std::string tmpl = "/tmp/" + tag + "-XXXXXX";
    if (!::mkdtemp(tmpl.data())) return Unavailable("cannot make a temporary checkpoint directory " + tmpl);
    path_ = tmpl;
    temporary_ = true;
    return Status::OK();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool temporary_ = false;
};

}  // namespace sf::examples

// The names attr of the checkpoint ops (kernels/checkpoint_service.h).
#include "kernels/checkpoint_service.h"

namespace sf {

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

}  // namespace sf

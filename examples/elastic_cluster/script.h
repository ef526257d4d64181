// The command script of the elastic_cluster demo: "train 40; add; drain 1;
// kill 0" as a list of commands, checked before anything starts.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "shardflow/status.h"

namespace sf::examples {

struct ScriptCommand {
  std::string op;   // "train", "add", "drain" or "kill"
  int64_t arg = 0;  // steps for train, node index for drain and kill
  std::string text; // the command as written, for messages
};

// Parses commands separated by ';' (blank ones skipped). InvalidArgument
// naming the command when it is unknown, lacks its number, or has extra words.
inline Result<std::vector<ScriptCommand>> ParseScript(const std::string& script) {
  std::vector<ScriptCommand> out;
  std::stringstream all(script);
  std::string part;
  while (std::getline(all, part, ';')) {
    std::stringstream words(part);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.empty()) continue;
    ScriptCommand c;
    c.op = w[0];
    c.text = w[0];
    for (size_t i = 1; i < w.size(); ++i) c.text += " " + w[i];
    const bool wants_number = c.op == "train" || c.op == "drain" || c.op == "kill";
    if (!wants_number && c.op != "add")
      return InvalidArgument("script command '" + c.text + "': unknown (use train N, add, drain I, kill I)");
    if (w.size() != (wants_number ? 2u : 1u))
      return InvalidArgument("script command '" + c.text + "': " +
                             (wants_number ? "takes one number" : "takes no argument"));
    if (wants_number) {
      char* end = nullptr;
      errno = 0;
      c.arg = std::strtoll(w[1].c_str(), &end, 10);
      if (errno != 0 || *end != '\0' || c.arg < (c.op == "train" ? 1 : 0))
        return InvalidArgument("script command '" + c.text + "': '" + w[1] + "' is not a " +
                               (c.op == "train" ? "positive step count" : "node index"));
    }
    out.push_back(c);
  }
  if (out.empty()) return InvalidArgument("the script has no command");
  return out;
}

}  // namespace sf::examples

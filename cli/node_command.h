// `shardflow node`: runs one cluster member in this process (docs/CLI.md).
#pragma once

#include <string>
#include <vector>

namespace sf {

// Parses the node options, starts the node and serves until SIGINT/SIGTERM
// or --lifetime-s; the process exit code (2 for a usage error, 1 when the
// node cannot start).
int NodeCommand(const std::vector<std::string>& argv);

}  // namespace sf

// `shardflow certs`: makes a cluster's TLS credentials (docs/CLI.md).
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace sf {

// What `shardflow certs init|issue` were given.
struct CertsFlags {
  std::string action;  // "init" or "issue"
  std::string dir;
  std::string role = "node";
  std::string name;
  std::vector<std::string> hosts;
  std::string ns;  // --namespace (sessions)
};

// The text `shardflow certs --help` prints.
extern const char kCertsUsage[];

// Declares the arguments of `certs` on its subcommand, writing into *flags.
void AddCertsFlags(CLI::App& certs, CertsFlags* flags);

// Runs `shardflow certs`; the process exit code (2 for usage errors, 1 when
// the credentials cannot be made, with the reason on stderr).
int CertsCommand(const CertsFlags& flags);

}  // namespace sf

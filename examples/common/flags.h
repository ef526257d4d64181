// Flags: the command-line flags of the examples and benchmarks, a thin
// adapter over CLI11 (cli/flags.h) so that a program declares its flags in a
// few chained calls. "--name value" and "--name=value"; boolean flags take no
// value (or true/false). Unknown flags and malformed values are errors naming
// the flag; given twice, the last value wins.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "shardflow/status.h"

namespace CLI {
class App;
}

namespace sf::examples {

class Flags {
 public:
  Flags();
  ~Flags();
  Flags(const Flags&) = delete;
  Flags& operator=(const Flags&) = delete;

  // Declares the flags a program accepts (name without "--", default, help).
  // REQUIRES: each name declared once, before Parse.
  Flags& Int(const std::string& name, int64_t def, const std::string& help);
  Flags& Double(const std::string& name, double def, const std::string& help);
  Flags& String(const std::string& name, const std::string& def, const std::string& help);
  Flags& Bool(const std::string& name, const std::string& help);
  // Parses argv; InvalidArgument naming the flag on an unknown flag, a missing
  // or malformed value. "-h"/"--help" sets help_requested().
  Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  // The help text: "Usage: PROGRAM [OPTIONS]" and one line per flag with its default.
  std::string Usage(const std::string& program) const;

  // The value of a declared flag. REQUIRES: declared with the matching kind.
  int64_t GetInt(const std::string& name) const;
  double GetDouble(const std::string& name) const;
  const std::string& GetString(const std::string& name) const;
  bool GetBool(const std::string& name) const;

 private:
  struct Flag {
    char kind;  // 'i', 'd', 's', 'b'
    int64_t i = 0;
    double d = 0;
    std::string s;
    bool b = false;
  };
  // Declares the flag's storage; CLI11 writes through pointers into it, which
  // std::map keeps stable.
  Flag& Add(const std::string& name, char kind);
  const Flag& Get(const std::string& name, char kind) const;

  std::unique_ptr<CLI::App> app_;
  std::map<std::string, Flag> flags_;
  bool help_ = false;
};

// Parses flags or exits: prints usage on --help (exit 0) or the error (exit 2).
void ParseOrExit(Flags& flags, int argc, char** argv, const std::string& program);

}  // namespace sf::examples

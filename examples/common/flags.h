// Flags: the small command-line parser shared by examples and benchmarks.
// "--name value" and "--name=value"; boolean flags take no value. Unknown
// flags and malformed values are errors naming the flag.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shardflow/status.h"

namespace sf::examples {

class Flags {
 public:
  // Declares the flags a program accepts (name without "--", default, help).
  Flags& Int(const std::string& name, int64_t def, const std::string& help);
  Flags& Double(const std::string& name, double def, const std::string& help);
  Flags& String(const std::string& name, const std::string& def, const std::string& help);
  Flags& Bool(const std::string& name, const std::string& help);
  // Parses argv; InvalidArgument naming the flag on an unknown flag or bad value.
  // "--help" sets help_requested().
  Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  std::string Usage(const std::string& program) const;

  int64_t GetInt(const std::string& name) const;
  double GetDouble(const std::string& name) const;
  const std::string& GetString(const std::string& name) const;
  bool GetBool(const std::string& name) const;

 private:
  struct Flag {
    char kind;  // 'i', 'd', 's', 'b'
    std::string value, help;
  };
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
  bool help_ = false;
};

// Parses flags or exits: prints usage on --help (exit 0) or the error (exit 2).
void ParseOrExit(Flags& flags, int argc, char** argv, const std::string& program);

}  // namespace sf::examples

// Test helpers for running the built programs as a user would.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace sf::testing {

struct CommandResult {
  int code = -1;    // exit status, -1 if it did not exit normally
  std::string out;  // what it printed on stdout (redirect 2>&1 in cmd for stderr)
};

// Runs cmd through the shell and collects its stdout.
inline CommandResult RunCommand(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), p)) r.out += buf.data();
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The last non-empty line of s.
inline std::string LastLine(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// The number after "key": in a JSON line, or -1 when the key is absent.
inline double JsonNumber(const std::string& line, const std::string& key) {
  auto p = line.find("\"" + key + "\": ");
  if (p == std::string::npos) return -1;
  return std::stod(line.substr(p + key.size() + 4));
}

}  // namespace sf::testing

#include "examples/common/flags.h"

#include <cstdio>
#include <cstdlib>

namespace sf::examples {

Flags& Flags::Int(const std::string& n, int64_t def, const std::string& help) {
  flags_[n] = {'i', std::to_string(def), help};
  order_.push_back(n);
  return *this;
}
Flags& Flags::Double(const std::string& n, double def, const std::string& help) {
  flags_[n] = {'d', std::to_string(def), help};
  order_.push_back(n);
  return *this;
}
Flags& Flags::String(const std::string& n, const std::string& def, const std::string& help) {
  flags_[n] = {'s', def, help};
  order_.push_back(n);
  return *this;
}
Flags& Flags::Bool(const std::string& n, const std::string& help) {
  flags_[n] = {'b', "0", help};
  order_.push_back(n);
  return *this;
}

Status Flags::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) return InvalidArgument("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    bool has_value = false;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) return InvalidArgument("unknown flag --" + name);
    Flag& f = it->second;
    if (f.kind == 'b') {
      if (has_value && value != "true" && value != "false" && value != "1" && value != "0")
        return InvalidArgument("--" + name + " takes no value (or true/false), got '" + value + "'");
      f.value = (!has_value || value == "true" || value == "1") ? "1" : "0";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) return InvalidArgument("--" + name + " needs a value");
      value = argv[++i];
    }
    char* end = nullptr;
    if (f.kind == 'i') {
      std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end) return InvalidArgument("--" + name + " needs an integer, got '" + value + "'");
    } else if (f.kind == 'd') {
      std::strtod(value.c_str(), &end);
      if (value.empty() || *end) return InvalidArgument("--" + name + " needs a number, got '" + value + "'");
    }
    f.value = value;
  }
  return Status::OK();
}

std::string Flags::Usage(const std::string& program) const {
  std::string s = "usage: " + program + " [flags]\n";
  for (const auto& n : order_) {
    const Flag& f = flags_.at(n);
    s += "  --" + n + (f.kind == 'b' ? "" : " VALUE") + "    " + f.help;
    if (f.kind != 'b') s += " (default " + (f.value.empty() ? std::string("\"\"") : f.value) + ")";
    s += "\n";
  }
  return s;
}

int64_t Flags::GetInt(const std::string& n) const { return std::strtoll(flags_.at(n).value.c_str(), nullptr, 10); }
double Flags::GetDouble(const std::string& n) const { return std::strtod(flags_.at(n).value.c_str(), nullptr); }
const std::string& Flags::GetString(const std::string& n) const { return flags_.at(n).value; }
bool Flags::GetBool(const std::string& n) const { return flags_.at(n).value == "1"; }

void ParseOrExit(Flags& flags, int argc, char** argv, const std::string& program) {
  Status s = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::fputs(flags.Usage(program).c_str(), stdout);
    std::exit(0);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n%s", program.c_str(), s.message().c_str(), flags.Usage(program).c_str());
    std::exit(2);
  }
}

}  // namespace sf::examples

#include "examples/common/flags.h"

#include <cassert>
#include <cstdio>
#include <cstdlib>

#include "cli/flags.h"

namespace sf::examples {

Flags::Flags() : app_(std::make_unique<CLI::App>()) {
  // The hand-written parser before CLI11 let the last of repeated flags win;
  // scripts may rely on overriding a default that way.
  app_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

Flags::~Flags() = default;

Flags::Flag& Flags::Add(const std::string& name, char kind) {
  assert(!flags_.count(name) && "flag declared twice");
  Flag& f = flags_[name];
  f.kind = kind;
  return f;
}

Flags& Flags::Int(const std::string& n, int64_t def, const std::string& help) {
  Flag& f = Add(n, 'i');
  f.i = def;
  app_->add_option("--" + n, f.i, help)->capture_default_str()->transform(cli::Integer<int64_t>());
  return *this;
}

Flags& Flags::Double(const std::string& n, double def, const std::string& help) {
  Flag& f = Add(n, 'd');
  f.d = def;
  app_->add_option("--" + n, f.d, help)->capture_default_str()->check(cli::Real());
  return *this;
}

Flags& Flags::String(const std::string& n, const std::string& def, const std::string& help) {
  Flag& f = Add(n, 's');
  f.s = def;
  app_->add_option("--" + n, f.s, help)->capture_default_str();
  return *this;
}

Flags& Flags::Bool(const std::string& n, const std::string& help) {
  app_->add_flag("--" + n, Add(n, 'b').b, help);
  return *this;
}

Status Flags::Parse(int argc, char** argv) {
  const cli::ParseResult r = cli::Parse(*app_, argc, argv);
  help_ = r.help != nullptr;
  return r.error.empty() ? Status::OK() : InvalidArgument(r.error);
}

std::string Flags::Usage(const std::string& program) const {
  app_->name(program);
  return app_->help();
}

const Flags::Flag& Flags::Get(const std::string& name, char kind) const {
  const Flag& f = flags_.at(name);
  assert(f.kind == kind && "flag read as another kind than declared");
  return f;
}

int64_t Flags::GetInt(const std::string& n) const { return Get(n, 'i').i; }
double Flags::GetDouble(const std::string& n) const { return Get(n, 'd').d; }
const std::string& Flags::GetString(const std::string& n) const { return Get(n, 's').s; }
bool Flags::GetBool(const std::string& n) const { return Get(n, 'b').b; }

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

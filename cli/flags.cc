#include "cli/flags.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace sf::cli {
namespace {

std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

// Lets every (sub)command keep what no option takes, so Parse names it in
// its own words instead of CLI11's "The following arguments were not expected".
void AllowExtras(CLI::App& app) {
  app.allow_extras();
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) AllowExtras(*sub);
}

// The message for the first argument no option of `app` took, or "".
std::string LeftoverError(const CLI::App& app) {
  const std::vector<std::string> left = app.remaining();
  if (left.empty()) return "";
  const std::string& a = left.front();
  if (a.size() > 1 && a[0] == '-') return "unknown option '" + a.substr(0, a.find('=')) + "'";
  if (!app.get_subcommands([](const CLI::App*) { return true; }).empty() && app.get_subcommands().empty())
    return "unknown command '" + a + "'";
  return "unexpected argument '" + a + "'";
}

// "0", "2e+06": a bound as a user would write it (std::to_string gives "0.000000").
std::string Shortest(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

CLI::Validator IntegerIn(int64_t min, int64_t max) {
  auto check = [min, max](std::string& text) -> std::string {
    int64_t v = 0;
    const char* begin = text.data();
    const char* end = begin + text.size();
    // A leading '+' stays accepted, as strtoll did before CLI11.
    if (text.size() > 1 && text[0] == '+' && text[1] != '-') ++begin;
    // from_chars takes base 10 only and reports overflow, unlike CLI11's strtoll(base 0).
    const auto [p, ec] = std::from_chars(begin, end, v);
    if (text.empty() || ec == std::errc::invalid_argument || p != end)
      return "'" + text + "' is not a decimal integer";
    // On overflow from_chars leaves v alone; the sign says which way it went.
    const bool overflow = ec == std::errc::result_out_of_range;
    if (overflow ? text[0] == '-' : v < min) return "'" + text + "' is below the minimum " + std::to_string(min);
    if (overflow || v > max) return "'" + text + "' is above the maximum " + std::to_string(max);
    // CLI11 converts the text after this check, as C would: "010" would be 8.
    text = std::to_string(v);
    return "";
  };
  // An empty description keeps the help's type column to CLI11's "INT".
  return CLI::Validator(check, "", "Integer");
}

CLI::Validator Real(double min, double max) {
  auto check = [min, max](std::string& text) -> std::string {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') return "'" + text + "' is not a number";
    if (!std::isfinite(v)) return "'" + text + "' is not a finite number";
    if (v < min) return "'" + text + "' is below the minimum " + Shortest(min);
    if (v > max) return "'" + text + "' is above the maximum " + Shortest(max);
    return "";
  };
  return CLI::Validator(check, "", "Real");
}

ParseResult Parse(CLI::App& app, int argc, const char* const* argv) {
  AllowExtras(app);
  ParseResult r;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    r.help = &app;
  } catch (const CLI::ParseError& e) {
    r.error = OneLine(e.what());
  }
  // The subcommands named on the line form a chain from app down.
  const CLI::App* deepest = &app;
  std::string leftover = LeftoverError(app);
  while (!deepest->get_subcommands().empty()) {
    deepest = deepest->get_subcommands().back();
    if (leftover.empty()) leftover = LeftoverError(*deepest);
  }
  r.command = deepest;
  if (r.help) {
    r.help = deepest;
  } else if (r.error.empty()) {
    r.error = leftover;
  }
  return r;
}

}  // namespace sf::cli

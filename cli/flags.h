// Command-line parsing shared by every shardflow program: the `shardflow`
// command, the examples and the benchmarks all parse with CLI11 (one engine),
// and this file adds what CLI11 2.1 lacks for them:
//  - stricter number checks: CLI11 alone reads "010" as octal and "0x10" as
//    hex, takes an empty value as 0 and clamps an int64 overflow silently;
//  - one wording for usage errors: an unexpected argument is named alone
//    ("unknown option '--x'"), every other error is CLI11's, which names the
//    flag ("--steps: 'abc' is not a decimal integer").
// Not thread-safe: parse once, from main.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

namespace sf::cli {

// A CLI11 validator accepting only base-10 integers in [min, max] ("-3",
// "42", "010" is ten); anything else fails naming the value. Attach it with
// Option::transform, not check: it rewrites the value to plain decimal for
// CLI11's conversion, and check() would drop that rewrite.
CLI::Validator IntegerIn(int64_t min, int64_t max);

// IntegerIn over the whole range of T (int, int64_t, ...).
template <typename T>
CLI::Validator Integer() {
  return IntegerIn(std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
}

// A CLI11 check (Option::check) accepting only a finite number in [min, max]
// ("0.5", "-1e-3"); "", "1.5x", "nan" and "1e999" fail naming the value.
CLI::Validator Real(double min = std::numeric_limits<double>::lowest(),
                    double max = std::numeric_limits<double>::max());

// What a command line asked for.
struct ParseResult {
  const CLI::App* help = nullptr;     // the (sub)command whose -h/--help was given, or null
  const CLI::App* command = nullptr;  // the deepest (sub)command named (the app itself if none)
  std::string error;                  // "" or the usage error, one line
};

// Parses argv with app and its subcommands; never throws. An argument no
// option takes is an error "unknown option '--x'", "unknown command 'x'" (where
// subcommands are expected) or "unexpected argument 'x'"; help wins over
// those, not over an earlier bad value.
ParseResult Parse(CLI::App& app, int argc, const char* const* argv);

}  // namespace sf::cli

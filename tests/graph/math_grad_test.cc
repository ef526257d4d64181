// PLACEHOLDER: the Math ops' gradient checks.
#include "tests/support/gradient_checker.h"
namespace sf::testing {
void AddMathGradChecks(GradCheckTable&) {}
}  // namespace sf::testing

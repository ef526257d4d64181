// PLACEHOLDER: the State ops' gradient checks.
#include "tests/support/gradient_checker.h"
namespace sf::testing {
void AddStateGradChecks(GradCheckTable&) {}
}  // namespace sf::testing

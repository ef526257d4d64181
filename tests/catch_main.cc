// Catch2's main, compiled once into its own library (it takes ~24 s).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

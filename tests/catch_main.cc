// The tests' main from Catch's header (tests/CMakeLists.txt: RV_HEADER_ONLY_DEPS), for builds
// that cannot link Catch's own compiled main (a LibTorch of the old C++ ABI).
#define CATCH_CONFIG_MAIN
#include "catch.h"

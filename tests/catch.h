// Include this instead of <catch2/catch.hpp> in every test.
//
// LibTorch's c10 pulls in glog, whose CHECK macro silently replaces Catch's CHECK (the assertion
// then never reaches Catch: a check that cannot fail). Include c10's logging first, then Catch,
// then restore Catch's CHECK; glog's header guard keeps later includes from redefining it.
#pragma once

#include <c10/util/Logging.h>

#include <catch2/catch.hpp>

#undef CHECK
#define CHECK(...) \
  INTERNAL_CATCH_TEST("CHECK", Catch::ResultDisposition::ContinueOnFailure, __VA_ARGS__)

//===- ToolMainTest.cpp - the exception boundary of every tool's main -----===//
#include "tools/ToolMain.h"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>

using strata::tools::runToolMain;
using testing::internal::CaptureStderr;
using testing::internal::GetCapturedStderr;

TEST(ToolMain, PassesTheExitStatusThrough) {
  CaptureStderr();
  EXPECT_EQ(runToolMain("strata-x", [] { return 0; }), 0);
  EXPECT_EQ(runToolMain("strata-x", [] { return 2; }), 2);
  EXPECT_EQ(GetCapturedStderr(), "");
}

TEST(ToolMain, AnExceptionIsOneLineAndExitOne) {
  CaptureStderr();
  EXPECT_EQ(runToolMain("strata-x",
                        []() -> int { throw std::out_of_range("map::at"); }),
            1);
  EXPECT_EQ(GetCapturedStderr(), "strata-x: internal error: map::at\n");
  CaptureStderr();
  EXPECT_EQ(runToolMain("strata-x", []() -> int { throw std::bad_alloc(); }),
            1);
  EXPECT_EQ(GetCapturedStderr(), "strata-x: error: out of memory\n");
  CaptureStderr();
  EXPECT_EQ(runToolMain("strata-x", []() -> int { throw 42; }), 1);
  EXPECT_EQ(GetCapturedStderr(),
            "strata-x: internal error: unknown exception\n");
}

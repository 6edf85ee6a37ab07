//===- ToolMain.h - the exception boundary of every tool's main -*- C++ -*-===//
//
// User errors are diagnostics and never exceptions; an exception that reaches
// main is a bug or an exhausted resource. Either way the user gets one line
// and exit status 1, never std::terminate's abort and core dump.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdio>
#include <exception>
#include <new>
#include <utility>

namespace strata::tools {

/// Runs \p body (returning the exit status) and turns any exception that
/// escapes it into one line on stderr and exit status 1:
/// "<tool>: error: out of memory" for std::bad_alloc, "<tool>: internal
/// error: <what()>" for any other std::exception, "<tool>: internal error:
/// unknown exception" for anything else.
template <typename Body> int runToolMain(const char *tool, Body &&body) {
  // Plain stdio: whatever failed may have been an allocation.
  try {
    return std::forward<Body>(body)();
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "%s: error: out of memory\n", tool);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: internal error: unknown exception\n", tool);
  }
  return 1;
}

} // namespace strata::tools

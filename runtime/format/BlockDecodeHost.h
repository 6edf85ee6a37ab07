//===- BlockDecodeHost.h - BlockDecode.h for host C++ -----------*- C++ -*-===//
//
// The host side of BlockDecode.h's contract: always-inlined functions and
// inline constexpr tables (one copy across translation units) over
// <cstdint>'s integer types. Host code includes this, never BlockDecode.h
// directly, so every host translation unit sees the same definitions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

#ifndef STRATA_FN
#define STRATA_FN inline __attribute__((always_inline))
#endif
#ifndef STRATA_TABLE
#define STRATA_TABLE inline constexpr
#endif

#include "runtime/format/BlockDecode.h"
#include "runtime/format/BlockDecodeInt8.h"

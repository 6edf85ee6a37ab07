//===- Utf8.h - the tokenizer's UTF-8 names --------------------*- C++ -*-===//
//
// The tokenizer uses the project's one UTF-8 module (runtime/format/Utf8.h)
// under its own namespace.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/Utf8.h"

namespace strata::tokenizer {
using format::appendUtf8;
using format::classifyUtf8;
using format::decodeUtf8;
using format::findInvalidUtf8;
using format::Utf8Status;
} // namespace strata::tokenizer

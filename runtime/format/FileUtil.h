//===- FileUtil.h - whole-file reads and atomic writes ------------*- C++
//-*-===//
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace strata::format {

/// Reads \p path ("-" = standard input) into \p out, refusing files larger
/// than \p maxBytes. Returns false and sets \p error on failure.
bool readWholeFile(const std::string &path, size_t maxBytes, std::string &out,
                   std::string &error);

/// Writes \p data to \p path ("-" = standard output) through a temporary
/// file in the same directory and a rename, so readers never see a partial
/// file and a failure leaves no file behind.
bool writeFileAtomic(const std::string &path, std::string_view data,
                     std::string &error);

} // namespace strata::format

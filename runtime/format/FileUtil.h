//===- FileUtil.h - whole-file reads and atomic writes ----------*- C++ -*-===//
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::format {

/// Reads \p path ("-" = standard input) into \p out, refusing files larger
/// than \p maxBytes. The open descriptor is checked, not the name: anything
/// but a regular file (a directory, /dev/zero, a FIFO) is refused with
/// "<path>: not a regular file" (standard input may also be a pipe or a
/// terminal), and the cap is enforced while reading, so a file that grows
/// is refused too. Returns false and sets \p error on failure.
bool readWholeFile(const std::string &path, size_t maxBytes, std::string &out,
                   std::string &error);

/// Writes \p data to \p path ("-" = standard output) through a temporary
/// file in the same directory and a rename, so readers never see a partial
/// file and a failure leaves no file behind.
bool writeFileAtomic(const std::string &path, std::string_view data,
                     std::string &error);

/// One output of writeFilesAtomic: a path and the bytes it gets.
using FileToWrite = std::pair<std::string, std::string_view>;

/// Writes every file of \p files, all or nothing: each goes to a temporary
/// file in its target's directory, and only once all of them are written
/// and flushed are they renamed onto their targets. If anything fails, the
/// temporaries are removed, targets replaced so far are restored, and every
/// existing file is left as it was. "-" (standard output, at most once) is
/// written after the files. A path named twice is refused. On failure
/// returns false and sets \p error to one line naming the path.
bool writeFilesAtomic(const std::vector<FileToWrite> &files,
                      std::string &error);

} // namespace strata::format

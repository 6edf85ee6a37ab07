//===- FileUtil.cpp - whole-file reads and atomic writes ------------------===//
#include "runtime/format/FileUtil.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::format {

bool readWholeFile(const std::string &path, size_t maxBytes, std::string &out,
                   std::string &error) {
  const bool isStdin = path == "-";
  int fd = isStdin ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = fmt::format("{}: cannot open: {}", path, std::strerror(errno));
    return false;
  }
  auto finish = [&](bool ok) {
    if (!isStdin)
      ::close(fd);
    return ok;
  };
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    error = fmt::format("{}: cannot stat: {}", path, std::strerror(errno));
    return finish(false);
  }
  // Standard input may be a pipe or a terminal; a named path must be a
  // regular file (a device such as /dev/zero never ends).
  if (S_ISDIR(st.st_mode) || (!isStdin && !S_ISREG(st.st_mode))) {
    error = fmt::format("{}: not a regular file", path);
    return finish(false);
  }
  auto tooLarge = [&] {
    error =
        fmt::format("{}: input is larger than {} MiB", path, maxBytes >> 20);
    return finish(false);
  };
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > maxBytes)
    return tooLarge();
  out.clear();
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      error = fmt::format("{}: read error: {}", path, std::strerror(errno));
      return finish(false);
    }
    if (n == 0)
      break;
    // The cap holds while reading: the file may have grown since fstat.
    if (static_cast<size_t>(n) > maxBytes - out.size())
      return tooLarge();
    out.append(buf, static_cast<size_t>(n));
  }
  return finish(true);
}

namespace {

/// A temporary file next to its target, removed unless committed.
struct PendingFile {
  std::string target;
  std::string temp;   ///< the temporary's path, "" once renamed or removed
  std::string backup; ///< a hard link to the target's old contents, or ""
  bool hadTarget = false;
  bool renamed = false;
};

/// Creates the temporary for \p p and writes \p data to it.
bool writeTemp(PendingFile &p, std::string_view data, std::string &error) {
  std::string templ = p.target + ".tmp.XXXXXX";
  int fd = ::mkstemp(templ.data());
  if (fd < 0) {
    error =
        fmt::format("{}: cannot create: {}", p.target, std::strerror(errno));
    return false;
  }
  p.temp = templ;
  // mkstemp creates the file 0600; give it the mode a plain create would.
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  const char *at = data.data();
  size_t left = data.size();
  bool ok = true;
  while (left > 0) {
    ssize_t n = ::write(fd, at, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    at += n;
    left -= static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  int savedErrno = errno;
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    error = fmt::format("{}: cannot write: {}", p.target,
                        std::strerror(savedErrno ? savedErrno : errno));
    return false;
  }
  return true;
}

/// Removes every temporary and backup; puts back targets already replaced.
void rollBack(std::vector<PendingFile> &pending) {
  for (PendingFile &p : pending) {
    if (p.renamed) {
      if (!p.backup.empty() &&
          std::rename(p.backup.c_str(), p.target.c_str()) == 0)
        p.backup.clear();
      else if (!p.hadTarget)
        ::unlink(p.target.c_str());
    }
    if (!p.temp.empty())
      ::unlink(p.temp.c_str());
    if (!p.backup.empty())
      ::unlink(p.backup.c_str());
  }
}

} // namespace

bool writeFilesAtomic(const std::vector<FileToWrite> &files,
                      std::string &error) {
  std::set<std::string> seen;
  const std::string_view *toStdout = nullptr;
  for (const auto &[path, data] : files) {
    if (!seen.insert(path).second) {
      error = fmt::format("{}: given as more than one output", path);
      return false;
    }
    if (path == "-")
      toStdout = &data;
  }

  std::vector<PendingFile> pending;
  pending.reserve(files.size());
  for (const auto &[path, data] : files) {
    if (path == "-")
      continue;
    PendingFile &p = pending.emplace_back();
    p.target = path;
    if (!writeTemp(p, data, error)) {
      rollBack(pending);
      return false;
    }
  }

  // A rename onto a directory would fail half-way through; find it first.
  for (PendingFile &p : pending) {
    struct stat st;
    if (::stat(p.target.c_str(), &st) != 0)
      continue;
    if (S_ISDIR(st.st_mode)) {
      error = fmt::format("{}: cannot write: it is a directory", p.target);
      rollBack(pending);
      return false;
    }
    p.hadTarget = true;
    // A hard link keeps the old contents, so a later failure can put them
    // back. Where links are impossible the file is replaced without one.
    // mkstemp picks a free name; link needs it absent again.
    std::string backup = p.target + ".old.XXXXXX";
    int fd = ::mkstemp(backup.data());
    if (fd < 0)
      continue;
    ::close(fd);
    ::unlink(backup.c_str());
    if (::link(p.target.c_str(), backup.c_str()) == 0)
      p.backup = backup;
  }

  for (PendingFile &p : pending) {
    if (std::rename(p.temp.c_str(), p.target.c_str()) != 0) {
      error =
          fmt::format("{}: cannot write: {}", p.target, std::strerror(errno));
      rollBack(pending);
      return false;
    }
    p.temp.clear();
    p.renamed = true;
  }
  for (PendingFile &p : pending)
    if (!p.backup.empty())
      ::unlink(p.backup.c_str());

  if (toStdout) {
    std::cout.write(toStdout->data(),
                    static_cast<std::streamsize>(toStdout->size()));
    std::cout.flush();
    if (!std::cout) {
      error = "cannot write to standard output";
      return false;
    }
  }
  return true;
}

bool writeFileAtomic(const std::string &path, std::string_view data,
                     std::string &error) {
  return writeFilesAtomic({{path, data}}, error);
}

} // namespace strata::format

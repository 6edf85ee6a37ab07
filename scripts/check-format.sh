#!/usr/bin/env bash
# clang-format (LLVM base, .clang-format) must leave every C++ file unchanged.
set -u
cd "$(dirname "$0")/.."
CF=${CLANG_FORMAT:-clang-format-19}
files=$(git ls-files '*.cpp' '*.h' 2>/dev/null)
[ -n "$files" ] || files=$(find ir passes runtime tools test codegen -name '*.cpp' -o -name '*.h' 2>/dev/null)
bad=0
for f in $files; do
  if ! "$CF" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "clang-format: $f needs formatting (run: $CF -i $f)"; bad=1
  fi
done
[ $bad -eq 0 ] && echo "clang-format: ok ($(echo "$files" | wc -w) files)"
exit $bad

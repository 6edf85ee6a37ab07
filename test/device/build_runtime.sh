#!/usr/bin/env bash
# On the lent GPU machine (no clang, no LLVM): builds the runtime alone
# (-DSTRATA_RUNTIME_ONLY=ON) into build-rt/ of the tree it is run from, its
# output in build-rt.log; on failure prints the log's last 30 lines and exits
# 1. Used by test/device/*.sh and bench/*.sh.
#   bash test/device/build_runtime.sh
cd "$(dirname "$0")/../.." || exit 1
if cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_RUNTIME_ONLY=ON > build-rt.log 2>&1 &&
   cmake --build build-rt -j >> build-rt.log 2>&1; then
  exit 0
fi
echo "error: the runtime did not build (build-rt.log):"
tail -30 build-rt.log
exit 1

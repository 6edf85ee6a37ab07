#!/usr/bin/env bash
# DESIGN.md layering: the runtime (outside runtime/format) never includes the
# compiler (ir/, passes/, codegen/); runtime/format includes nothing above it.
set -u
cd "$(dirname "$0")/.."
fail=0
hits=$(grep -rnE '#include +"(ir|passes|codegen)/' runtime --include='*.h' --include='*.cpp' --include='*.inc' 2>/dev/null | grep -v '^runtime/format/' || true)
if [ -n "$hits" ]; then
  echo "layering: runtime/ includes the compiler:"; echo "$hits"; fail=1
fi
hits=$(grep -rnE '#include +"(ir|passes|codegen|tools)/|#include +"runtime/(cpu|cuda|hip|[A-Z])' runtime/format 2>/dev/null || true)
if [ -n "$hits" ]; then
  echo "layering: runtime/format includes a higher layer:"; echo "$hits"; fail=1
fi
hits=$(grep -rnE '#include +"(passes|codegen|tools)/' ir 2>/dev/null || true)
if [ -n "$hits" ]; then
  echo "layering: ir/ includes a higher layer:"; echo "$hits"; fail=1
fi
[ $fail -eq 0 ] && echo "layering: ok"
exit $fail

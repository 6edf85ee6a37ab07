#!/usr/bin/env bash
# BlockDecode.h must compile as device code for both GPU targets exactly as
# the code generator compiles kernels (no SDK headers), and its tables must be
# device data. Compiles block_decode_kernels.cu, which includes the header
# with a device prelude, and checks:
#   1. gfx1151 code object (-x hip, -Werror): builds; the four strata_ grid
#      tables are OBJECT symbols of the code object's .rodata, with their
#      sizes (kvalues_iq4nl is not read by the decoders: strata_iq4nl8 holds
#      the codebook in registers).
#   2. sm_90 PTX (-x cuda, -Werror): builds; the tables are initialised .global
#      arrays; ptxas (if installed) assembles the PTX.
# usage: block_decode_device_check.sh SOURCE_DIR WORK_DIR
# Exit 0 all good, 1 any failure, 77 (skipped) if clang-19 is missing.
set -u
src=${1:?usage: $0 SOURCE_DIR WORK_DIR}
work=${2:?usage: $0 SOURCE_DIR WORK_DIR}
kernels=$src/test/unit/format/block_decode_kernels.cu

tool() { # first of: $name-19 on PATH, LLVM 19's bin directory
  command -v "$1-19" 2>/dev/null || { [ -x "/usr/lib/llvm-19/bin/$1" ] && echo "/usr/lib/llvm-19/bin/$1"; }
}
clang=${CLANG:-$(tool clang)}
readelf=$(tool llvm-readelf)
if [ -z "$clang" ] || [ -z "$readelf" ]; then
  echo "block_decode_device_check: SKIPPED: clang-19 / llvm-readelf-19 not found"
  exit 77
fi
mkdir -p "$work" || exit 1
fail=0
bad() { echo "block_decode_device_check: FAIL: $*"; fail=1; }

hip=(-x hip --offload-arch=gfx1151 --cuda-device-only --no-gpu-bundle-output
     -nogpulib -nogpuinc -O3 -Wall -Wextra -Werror -I "$src")
cuda=(-x cuda --cuda-gpu-arch=sm_90 --cuda-device-only -nocudainc -nocudalib
      -O3 -Wall -Wextra -Werror -Wno-unknown-cuda-version -I "$src")
tables="strata_iq3s_grid:2048 strata_iq3xxs_grid:1024 strata_iq2xxs_grid:2048
        strata_ksigns_iq2xs:128"

# 1. gfx1151
co=$work/block_decode.gfx1151.co
if "$clang" "${hip[@]}" -c "$kernels" -o "$co"; then
  rodata=$("$readelf" -SW "$co" | sed -n 's/^ *\[ *\([0-9]*\)\] \.rodata .*/\1/p')
  syms=$("$readelf" -sW "$co")
  for t in $tables; do
    name=${t%%:*} size=${t##*:}
    # Num: Value Size Type Bind Vis Ndx Name
    echo "$syms" | awk -v n="$name" -v s="$size" -v x="$rodata" \
      '$3 == s && $4 == "OBJECT" && $7 == x && $8 ~ n { found = 1 } END { exit !found }' ||
      bad "gfx1151: $name is not a $size-byte OBJECT in .rodata (section $rodata)"
  done
  kernels_co=$("$readelf" -sW "$co" | awk '$4 == "FUNC" && $8 ~ /^dq8_/ { print $8 }' | sort -u | wc -l)
  [ "$kernels_co" -eq 13 ] || bad "gfx1151: expected 13 dq8_* kernels, found $kernels_co"
else
  bad "gfx1151: BlockDecode.h does not compile as HIP device code"
fi

# 2. sm_90
ptx=$work/block_decode.sm_90.ptx
if "$clang" "${cuda[@]}" -S "$kernels" -o "$ptx"; then
  for t in $tables; do
    name=${t%%:*} size=${t##*:}
    grep -qE "^\.global \.align [0-9]+ \.b8 [_A-Za-z0-9]*$name\[$size\] = \{" "$ptx" ||
      bad "sm_90: $name is not an initialised $size-byte .global array in the PTX"
  done
  ptxas=$(command -v ptxas || { [ -x /usr/local/cuda/bin/ptxas ] && echo /usr/local/cuda/bin/ptxas; })
  if [ -n "$ptxas" ]; then
    "$ptxas" -arch=sm_90 "$ptx" -o "$work/block_decode.sm_90.cubin" ||
      bad "sm_90: ptxas rejects the PTX"
  else
    echo "block_decode_device_check: note: no ptxas, PTX not assembled"
  fi
else
  bad "sm_90: BlockDecode.h does not compile as CUDA device code"
fi

[ $fail -eq 0 ] && echo "block_decode_device_check: ok (gfx1151 code object, sm_90 PTX, tables as device data)"
exit $fail

#!/usr/bin/env bash
# On the GPU machine, after bench/q4k_int8_debug.sh prepare (carry
# build-q4kdbg): single-token prompts through its i8 and off plans (one row:
# the decode GEMVs), each with --check, then token 570's layer-1 dumps
# (a.3, y.1.perm, y.1.off, y.1.h) into $OUT/one.tar for
#   python3 bench/q4k_int8_emulate.py one      (here, after tar xf one.tar)
#   bash bench/q4k_int8_one.sh
cd "$(dirname "$0")/.." || exit 1
R=build-rt/bin/strata-run D=build-q4kdbg S="--synthetic-weights 1"
for tok in 570 1 2 3 4 5 6 7 8 9 10 11 100 1000 2000; do
  for v in i8 off; do
    echo "tok $tok $v: $($R $D/$v --gguf $D/q4k.gguf $S --tokens $tok --check 2>&1 | grep -E "check|error" | tr '\n' ' ' | cut -c1-200)"
  done
done
Q=${OUT:?run on the GPU machine (OUT names the results folder)}/one; mkdir -p $Q
$R $D/i8 --gguf $D/q4k.gguf $S --tokens 570 --dump-buffer a.3="$Q/a3.f32" --dump-buffer y.1.perm="$Q/perm.f32" \
  --dump-buffer y.1.off="$Q/off.f32" --dump-buffer y.1.h="$Q/i8.h.f32" 2>&1 | tail -2
$R $D/off --gguf $D/q4k.gguf $S --tokens 570 --dump-buffer y.1.h="$Q/off.h.f32" 2>&1 | tail -2
(cd $OUT && tar cf one.tar one && rm -rf one)

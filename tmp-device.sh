#!/usr/bin/env bash
set -u
tar xJf build-carry/batch.tar.xz
bash test/device/build_runtime.sh > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 120 python3 test/device/diffsuite.py run --bin build-rt/bin --dir build-decode-batch/ds-argmax --results $OUT/diffsuite-argmax.txt 2>&1 | tail -8
ROUNDS=2 BATCHES="1 16" timeout 420 bash bench/decode_batch_ab.sh run $OUT 2>&1 | tail -40

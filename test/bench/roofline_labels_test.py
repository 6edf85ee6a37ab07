#!/usr/bin/env python3
"""bench/roofline.py's labels stay readable (issue 35, item 4): on a picture
with a dense cluster of row kernels (thirty families within a factor of two
of one another) and peers beside the GEMMs, no two drawn labels overlap, none
covers the legend, and every family and peer whose label found no room is a
numbered row of the table under the picture (its number drawn at its marker
where that fits). The boxes are the rendered texts' (matplotlib's Agg
renderer), the ones the PNG shows.

Exits 77 (skipped) where matplotlib is missing.
  python3 test/bench/roofline_labels_test.py
"""
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

try:
    import matplotlib  # noqa: F401
except ImportError:
    print("SKIPPED: matplotlib is missing (pip install matplotlib)")
    sys.exit(77)

import roofline  # noqa: E402


def family(label, flops, nbytes, seconds):
    return dict(label=label, flops=flops, bytes=nbytes, seconds=seconds,
                tflops=flops / seconds / 1e12, ms=seconds * 1e3)


def doc_with_cluster(seed):
    rng = random.Random(seed)
    fams = []
    # The dense cluster: thirty row kernels of intensity 0.1-0.2 FLOP/B at
    # 0.3-0.6 TFLOP/s, shares from 0.01 to 2 %.
    for i in range(30):
        nbytes = rng.uniform(5e7, 5e8)
        flops = nbytes * rng.uniform(0.1, 0.2)
        fams.append(family(f"fused:row_kernel_{i}+rms_norm+mul", flops, nbytes,
                           flops / rng.uniform(0.3e12, 0.6e12)))
    # The big ones: GEMMs and experts near the matrix roof.
    for name, inten, tf, sec in (("matmul", 1500, 550, 0.17), ("moe_grouped_swiglu", 1200, 300, 0.17),
                                 ("moe_grouped_down", 800, 180, 0.09), ("qsa_select", 900, 9, 0.05)):
        flops = tf * 1e12 * sec
        fams.append(family(name, flops, flops / inten, sec))
    peers = {"results": [dict(status="ok", group="moe", name=f"gemms{i}", impl=f"torch impl {i}",
                              flops=1e12, bytes=1e12 / rng.uniform(150, 250), tflops=rng.uniform(300, 450))
                         for i in range(6)]}
    run = dict(status="ok", T=16384, families=fams, kernels=1317,
               kernel_seconds=sum(f["seconds"] for f in fams), floor_seconds=0.4)
    return dict(strata=dict(seed_tokens=16384, runs=[run],
                            plan=dict(name="plan-last", target="sm_90",
                                      roofline=dict(mem_gbs=4280, mat_tflops=678, vec_tflops=67))),
                peers=peers, meta=dict(gpu="NVIDIA H200", driver="x", date="2026-12-03", commit="test"))


def check(seed, out):
    layouts = []
    paths = roofline.write_pngs(doc_with_cluster(seed), out, stamp=f"test{seed}", layouts=layouts)
    assert len(paths) == 1 and os.path.getsize(paths[0]) > 10000, paths
    (layout,) = layouts
    items, table = layout["items"], layout["table"]
    assert len(items) == 34 + 6, len(items)
    boxes = [i["box"] for i in items if i["box"] is not None]
    for a in range(len(boxes)):
        for b in range(a + 1, len(boxes)):
            assert not roofline.boxes_overlap(boxes[a], boxes[b]), (seed, boxes[a], boxes[b])
    for box in boxes:
        assert not roofline.boxes_overlap(box, layout["legend"]), (seed, box, layout["legend"])
    labelled = [i for i in items if i["number"] is None]
    numbered = [i for i in items if i["number"] is not None]
    assert all(i["box"] is not None for i in labelled)
    assert [i["number"] for i in numbered] == list(range(1, len(numbered) + 1))
    assert table == numbered
    # The cluster cannot hold thirty labels: some go to the table, and the
    # slowest families (placed first) keep theirs.
    assert numbered, "the dense cluster fitted every label: the test's cluster is not dense"
    assert all(i["number"] is None for i in items[:3]), [i["text"] for i in items[:3]]
    return len(labelled), len(numbered)


def main():
    with tempfile.TemporaryDirectory() as out:
        for seed in (1, 2, 3):
            labelled, numbered = check(seed, out)
            print(f"seed {seed}: {labelled} labels drawn, {numbered} in the table, no two overlapping")
    print("roofline_labels: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

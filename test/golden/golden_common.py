"""Helpers shared by the end-to-end golden scripts in this folder."""
import argparse
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cmd, stderr_out=False):
    """Runs a tool; raises with its whole output if it fails. Returns its
    standard output, or its standard error with stderr_out."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stderr if stderr_out else r.stdout


def nmse(ours, ref):
    """Normalised mean squared error sum((ours - ref)^2) / sum(ref^2), in f64."""
    import numpy as np
    ref = np.asarray(ref, dtype=np.float64)
    diff = np.asarray(ours, dtype=np.float64) - ref
    return float((diff ** 2).sum() / (ref ** 2).sum())


def end_to_end_args(add_options=None):
    """Parses --bin (the strata tools' folder) and --workdir (created), plus
    what add_options(parser) adds; returns the args and tool(name) -> path."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="directory with strata tools")
    ap.add_argument("--workdir", required=True)
    if add_options:
        add_options(ap)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    return a, lambda name: os.path.join(a.bin, name)

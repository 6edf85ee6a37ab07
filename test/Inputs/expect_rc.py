#!/usr/bin/env python3
"""Runs a command and succeeds only if it exits with the given status.

usage: expect_rc.py STATUS COMMAND [ARGS...]   (its stderr is passed on)
"""
import subprocess
import sys

want = int(sys.argv[1])
got = subprocess.run(sys.argv[2:]).returncode
if got != want:
    sys.exit(f"expect_rc: {sys.argv[2]} exited {got}, expected {want}")

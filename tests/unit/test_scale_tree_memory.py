"""``benchmarks/scale.py``'s process-tree memory (psutil): a child counts."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks.scale import tree_memory


def test_tree_memory_counts_the_children():
    alone = tree_memory(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with_child = tree_memory(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert with_child["processes"] == alone["processes"] + 1
    assert with_child["rss_mib"] > with_child["driver_rss_mib"] > 0
    if sys.platform == "linux":  # PSS: Linux only
        assert 0 < with_child["pss_mib"] <= with_child["rss_mib"]


def test_tree_memory_of_an_exited_process_is_empty():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert tree_memory(child.pid) == {
        "rss_mib": 0.0,
        "pss_mib": None,
        "driver_rss_mib": 0.0,
        "processes": 0,
    }

#!/usr/bin/env python3
"""Runs one pytest file of the package's tests; exits 77 (skipped) when this
Python has no torch or pytest, unless ATTUNE_REQUIRE_TORCH=1 (CI), where
their absence fails the run."""
import importlib.util
import os
import sys

missing = [m for m in ("torch", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    print(f"{sys.executable} has no {' and no '.join(missing)} (tools/setup.sh installs them)")
    sys.exit(1 if os.environ.get("ATTUNE_REQUIRE_TORCH") == "1" else 77)

import pytest  # noqa: E402

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", os.path.dirname(os.path.abspath(__file__)),
                      *sys.argv[1:]]))

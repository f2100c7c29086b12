"""Runs every Python test (unit and the conformance suites against a live denv) and ends with
one line, `python: N passed, N failed`, for CI to add to the Node runner's counts.

    python3 python/tests/run.py        (scripts/test.sh runs it after the Node tests)
"""

from __future__ import annotations

import sys
import unittest
import warnings
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
warnings.simplefilter("ignore", ResourceWarning)

suite = unittest.defaultTestLoader.discover(str(here), pattern="test_*.py", top_level_dir=str(here))
result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
passed = result.testsRun - failed - len(result.skipped)
print(f"python: {passed} passed, {failed} failed, {len(result.skipped)} skipped")
sys.exit(0 if failed == 0 else 1)

"""docs/sdk/python.md is what the docstrings generate (regenerate: python3 python/tools/gen_docs.py)."""

from __future__ import annotations

import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "tools"))


class DocsFresh(unittest.TestCase):
    def test_reference_is_generated(self) -> None:
        import gen_docs

        committed = (ROOT / "docs" / "sdk" / "python.md").read_text(encoding="utf-8")
        self.assertEqual(committed, gen_docs.render())


if __name__ == "__main__":
    unittest.main()

"""The Python package's error table is the server's: checked against the OpenAPI document the
server generates from packages/protocol's table (its ``x-denv-error-codes``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "src"))

from denv.errors import ERROR_CODES  # noqa: E402


def openapi_document() -> dict:
    script = 'const m = await import("@denv/server"); process.stdout.write(JSON.stringify(m.openApiDocument()));'
    out = subprocess.run(
        [os.environ.get("DENV_NODE", "node"), "--input-type=module", "-e", script],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout)


class ErrorCodes(unittest.TestCase):
    def test_the_table_is_the_servers(self) -> None:
        doc = openapi_document()
        self.assertEqual(ERROR_CODES, doc["x-denv-error-codes"])
        # And every error answer in the document uses exactly those codes.
        error = doc["paths"]["/v1/envs"]["get"]["responses"]["default"]["content"]["application/json"]["schema"]
        self.assertEqual(sorted(error["properties"]["error"]["properties"]["code"]["enum"]), sorted(ERROR_CODES))


if __name__ == "__main__":
    unittest.main()

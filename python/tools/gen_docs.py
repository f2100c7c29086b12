"""Generates the Python package's reference (docs/sdk/python.md) from its docstrings: the sandbox
surface, the client and the error classes, each public method with its signature. A test
regenerates it and compares, so the reference cannot go stale.

    python3 python/tools/gen_docs.py          writes docs/sdk/python.md
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "src"))


def _doc(obj: object) -> str:
    return inspect.cleandoc(obj.__doc__) if obj.__doc__ else ""


def _members(cls: type) -> list[str]:
    out = []
    for name, member in cls.__dict__.items():
        if name.startswith("_") and name not in ("__enter__", "__exit__", "__aenter__", "__aexit__"):
            continue
        fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if isinstance(member, property):
            doc = _doc(member.fget) if member.fget else ""
            out.append(f"- `{name}` (property){' — ' + doc.splitlines()[0] if doc else ''}")
        elif inspect.isfunction(fn):
            sig = str(inspect.signature(fn)).replace("'", "")
            prefix = "classmethod " if isinstance(member, classmethod) else "async " if inspect.iscoroutinefunction(fn) else ""
            doc = " ".join(_doc(fn).split())
            out.append(f"- `{prefix}{name}{sig}`{' — ' + doc if doc else ''}")
    return out


def render() -> str:
    import denv
    from denv import client, errors, sandbox

    lines = [
        "# denv (Python) reference",
        "",
        "Generated from the docstrings by `python3 python/tools/gen_docs.py`; do not edit.",
        "",
        "## denv.sandbox",
        "",
        _doc(sandbox),
        "",
    ]
    for cls in (sandbox.Sandbox, sandbox.AsyncSandbox, sandbox.Commands, sandbox.Files, sandbox.CommandResult):
        lines += [f"### `{cls.__name__}`", "", _doc(cls), "", *_members(cls), ""]
    lines += ["## denv.client", "", "### `Client`", "", _doc(client.Client), "", *_members(client.Client), ""]
    lines += ["## denv.errors", "", _doc(errors), ""]
    for name in sorted(set(errors.ERROR_FAMILIES.values()), key=lambda c: c.__name__):
        codes = ", ".join(f"`{c}`" for c, cls in errors.ERROR_FAMILIES.items() if cls is name)
        lines += [f"- `{name.__name__}` ({codes}): {' '.join(_doc(name).split())}"]
    lines += ["", f"Everything above is exported from `denv` ({len(denv.__all__)} names)."]
    return "\n".join(line.rstrip() for line in lines).strip() + "\n"


if __name__ == "__main__":
    target = ROOT / "docs" / "sdk" / "python.md"
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")

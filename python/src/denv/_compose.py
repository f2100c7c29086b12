"""What the adapters need from a compose file without a YAML library (none is in the standard
library): loading it from the forms frameworks pass, marking it as a denv project, a stable name
for it, and which service is the default."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

COMPOSE_NAMES = ["compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml"]


def load_compose(config: Any, *, base_dir: str | None = None) -> str:
    """Compose text from a path (a file or a directory holding one), a mapping, or a pydantic model
    (Inspect's ComposeConfig). JSON is YAML, so mappings travel as JSON."""
    if config is None:
        for name in COMPOSE_NAMES:
            p = Path(base_dir or os.getcwd()) / name
            if p.is_file():
                return p.read_text(encoding="utf-8")
        raise ValueError(
            "no compose file: pass one as the sandbox config (e.g. sandbox=('denv', 'compose.yaml')) "
            f"or put one of {', '.join(COMPOSE_NAMES)} in {base_dir or os.getcwd()}"
        )
    if isinstance(config, (str, os.PathLike)):
        p = Path(config)
        if not p.is_absolute() and base_dir:
            p = Path(base_dir) / p
        if p.is_dir():
            for name in COMPOSE_NAMES:
                if (p / name).is_file():
                    return (p / name).read_text(encoding="utf-8")
            raise FileNotFoundError(f"{p} holds none of {', '.join(COMPOSE_NAMES)}")
        if not p.is_file():
            raise FileNotFoundError(f"compose file {p} does not exist")
        return p.read_text(encoding="utf-8")
    if isinstance(config, dict):
        return json.dumps(config)
    dump = getattr(config, "model_dump", None)
    if callable(dump):
        return json.dumps(dump(by_alias=True, exclude_none=True, mode="json"))
    raise TypeError(f"cannot read a compose file from {type(config).__name__}")


def with_denv_block(text: str, kind: str = "agent", egress: str | None = None) -> str:
    """The compose text with an x-denv block (kind, and egress when given) when it has none; a file
    that has its own block keeps it as written."""
    stripped = text.lstrip()
    block = {"kind": kind, **({"egress": egress} if egress else {})}
    if stripped.startswith("{"):
        doc = json.loads(text)
        doc.setdefault("x-denv", block)
        return json.dumps(doc)
    if re.search(r"^x-denv\s*:", text, re.M):
        return text
    return "x-denv:\n" + "".join(f"  {k}: {v}\n" for k, v in block.items()) + text


def project_name(prefix: str, text: str, extra: str = "") -> str:
    """A stable project name for this content: the same file deploys once and is reused."""
    digest = hashlib.sha256((text + "\0" + extra).encode()).hexdigest()[:12]
    return f"{prefix}-{digest}"


def default_service(text: str, services: list[str]) -> str:
    """Inspect's rule: the service marked ``x-default: true``, else the one named ``default``, else
    the only one."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        svcs = json.loads(text).get("services", {})
        for name, svc in svcs.items():
            if isinstance(svc, dict) and (svc.get("x-default") is True or svc.get("x_default") is True):
                return name
    else:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^(\s+)x-default\s*:\s*(true|yes|True)\s*(#.*)?$", line)
            if not m:
                continue
            indent = len(m.group(1))
            for j in range(i - 1, -1, -1):
                h = re.match(r"^(\s*)([A-Za-z0-9_.-]+)\s*:\s*(#.*)?$", lines[j])
                if h and len(h.group(1)) < indent:
                    if h.group(2) in services:
                        return h.group(2)
                    break
    if "default" in services:
        return "default"
    if len(services) == 1:
        return services[0]
    raise RuntimeError(
        f"No 'default' service found among {services}: name one service 'default' or add "
        "'x-default: true' to it"
    )


def kind_of(text: str, default: str = "agent") -> str:
    """The x-denv kind a compose file declares (the project must be created with the same)."""
    if text.lstrip().startswith("{"):
        block = json.loads(text).get("x-denv") or {}
        return str(block.get("kind") or default)
    m = re.search(r"^x-denv\s*:\s*\n((?:[ \t]+.*\n?)*)", text, re.M)
    if m:
        k = re.search(r"^[ \t]+kind\s*:\s*([A-Za-z-]+)", m.group(1), re.M)
        if k:
            return k.group(1)
    return default

"""Deploy-once, fork-many: the pattern every adapter uses. A compose file is deployed once as the
environment ``base`` of a project named after its content (so the same file is reused across
processes and runs); each episode forks that environment's version."""

from __future__ import annotations

import threading

from ._compose import kind_of, project_name
from .client import Client, Deployment, Environment
from .errors import DenvError

_lock = threading.Lock()


def deploy_failure(d: Deployment, what: str) -> RuntimeError:
    failed = next((p for p in d["phases"] if p["status"] == "failed"), None)
    where = f" in phase {failed['name']}: {failed['reason']}" if failed else f": {d['reason']}"
    return RuntimeError(f"denv could not deploy {what}{where} (deployment {d['id']})")


def ensure_base(client: Client, prefix: str, compose: str, dotenv: str = "") -> tuple[str, Environment]:
    """(project name, its running ``base`` environment), deploying it when it is not there."""
    name = project_name(prefix, compose, dotenv)
    with _lock:
        try:
            env = client.env(f"{name}/base")
            if env["status"] == "running" and env["current_version_id"]:
                return name, env
        except DenvError as e:
            if e.code != "not_found":
                raise
        try:
            project = client.project(name)
        except DenvError as e:
            if e.code != "not_found":
                raise
            project = client.create_project(name, kind_of(compose), compose, dotenv=dotenv or None)
        d = client.deploy(project["id"], "base", wait=True)
        if d["status"] != "succeeded":
            raise deploy_failure(d, "the compose file")
        return name, client.env(f"{name}/base")


def verdict(d: Deployment) -> dict:
    """The verify deployment's verdict evidence: {reward, reason, exit_code, agent}."""
    if d["status"] != "succeeded":
        raise RuntimeError(f"verify did not complete: {d['reason']} (deployment {d['id']})")
    return dict(d["verify"] or {})

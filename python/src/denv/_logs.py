"""An environment's logs (GET /v1/envs/{id}/logs), read a line at a time as they stream."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from ._api_methods import path_of
from .errors import error_for


def read_logs(
    client: Any,
    env: str,
    *,
    service: str | None = None,
    tail: int | None = None,
    since: str | None = None,
    follow: bool = False,
) -> Iterator[dict[str, str]]:
    """Each line a service wrote, as ``{"service", "stream", "time", "line"}``. Followed, it goes
    on until the caller stops iterating (closing the generator closes the connection)."""
    query = {
        k: v
        for k, v in (
            ("service", service),
            ("tail", None if tail is None else str(int(tail))),
            ("since", since),
            ("follow", "true" if follow else None),
        )
        if v is not None
    }
    url = f"{client.server}{path_of('envs.logs', id=env)}?" + urllib.parse.urlencode(query)
    res = client._open(urllib.request.Request(url, method="GET"), client.timeout_s)
    with res:
        try:
            for raw in res:
                if not raw.strip():
                    continue  # a keep-alive while the services are quiet
                msg = json.loads(raw)
                if "error" in msg:
                    raise error_for(str(msg["error"].get("code", "internal")), str(msg["error"].get("message", "")))
                yield {k: str(msg[k]) for k in ("service", "stream", "time", "line")}
        except TimeoutError:
            raise error_for(
                "timeout", f"the server sent nothing for {client.timeout_s} s while logs were followed"
            ) from None

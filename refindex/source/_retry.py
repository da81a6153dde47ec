"""Retries for reads over a network: transient failures (drops, timeouts, throttling, 5xx) only."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass
class RetryPolicy:
    """Transient network failures are retried ``retries`` more times, waiting ``backoff``, 2x, 4x... seconds."""

    retries: int = 3
    backoff: float = 0.25

    def delays(self) -> list[float]:
        return [self.backoff * (2 ** attempt) for attempt in range(self.retries)]


retry_policy = RetryPolicy()  # the process's policy (tests shorten the backoff)

_TRANSIENT_NAMES = {"ClientConnectorError", "ServerDisconnectedError", "ClientOSError", "ClientPayloadError",
                    "ServerTimeoutError", "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
                    "ConnectionClosedError", "IncompleteReadError", "ResponseStreamingError",
                    "IncompleteRead"}


def is_transient(e: BaseException) -> bool:
    """A failure worth retrying: connection drops, timeouts, throttling and 5xx responses."""
    # fsspec's http reports any failed request as FileNotFoundError: look at the cause too.
    for x in (e, e.__cause__, e.__context__):
        if x is None:
            continue
        if type(x).__name__ in _TRANSIENT_NAMES:
            return True
        status = getattr(x, "status", None) or getattr(x, "code", None)
        if isinstance(status, int) and (status == 429 or 500 <= status < 600):
            return True
    if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    if isinstance(e, (ConnectionError, TimeoutError)):
        return True
    text = str(e)
    return any(s in text for s in ("SlowDown", "Throttl", "503 Service", "Service Unavailable"))


def with_retries(call, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, retried on transient failures (other failures raise at once)."""
    for delay in retry_policy.delays():
        try:
            return call(*args, **kwargs)
        except Exception as e:
            if not is_transient(e):
                raise
            time.sleep(delay)
    return call(*args, **kwargs)

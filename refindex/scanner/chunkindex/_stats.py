"""What the chunk-index readers did in one scan, for ``--stats``: datasets per index type read
natively, the ones libhdf5 listed instead (and why), index bytes and fetch rounds."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MAX_LISTED = 50  # fallbacks listed one by one in the stats (the count covers them all)


@dataclass
class IndexStats:
    native: Counter = field(default_factory=Counter)  # index type -> datasets listed natively
    chunks: int = 0  # chunks listed natively
    libhdf5: int = 0  # datasets listed by libhdf5's chunk_iter
    fallbacks: list[dict[str, str]] = field(default_factory=list)  # {"path", "index", "reason"}
    rounds: int = 0  # fetches of index structures (each a wait for its ranges together)
    nbytes: int = 0  # bytes of index structures read
    seconds: float = 0.0

    def fell_back(self, path: str, index: str, reason: str) -> None:
        self.libhdf5 += 1
        self.fallbacks.append({"path": path, "index": index, "reason": reason})

    def merge(self, other: "IndexStats") -> None:
        self.native.update(other.native)
        self.chunks += other.chunks
        self.libhdf5 += other.libhdf5
        self.fallbacks.extend(other.fallbacks)
        self.rounds += other.rounds
        self.nbytes += other.nbytes
        self.seconds += other.seconds

    def as_dict(self) -> dict[str, Any]:
        return {"native": dict(sorted(self.native.items())), "native_chunks": self.chunks,
                "libhdf5": self.libhdf5, "fallbacks": self.fallbacks[:MAX_LISTED], "index_fetches": self.rounds,
                "index_bytes": self.nbytes, "index_seconds": round(self.seconds, 4)}

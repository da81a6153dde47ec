"""The rows a batch records (one per input) and the report it returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["indexed", "up_to_date", "failed"]


@dataclass(slots=True)
class FileResult:
    """One manifest row: what happened to one input (slots: a batch keeps one per input, 10^5 of them)."""

    source: str
    index: str  # the index file or folder; the repository for Icechunk (its group in ``group``)
    status: Status
    size: int | None = None
    etag: str | None = None
    mtime: float | str | None = None
    version: str | None = None  # a version id / generation, where the store has one
    keys: int | None = None
    arrays: int | None = None
    chunks: int | None = None
    inline_chunks: int | None = None
    index_bytes: int | None = None
    seconds: float | None = None
    error: str | None = None
    options: str | None = None
    finished: str | None = None
    check: dict[str, Any] | None = None  # schema check against a template: {"ok", "differences"}
    group: str | None = None  # Icechunk: the file's group in the repository

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BatchReport:
    """What a batch did; ``results`` follow the order of the inputs."""

    results: list[FileResult]
    manifest: str | None
    seconds: float
    combined: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    manifest_error: str | None = None  # why the manifest could not be written (``manifest`` is then None)

    def _with(self, status: str) -> list[FileResult]:
        return [r for r in self.results if r.status == status]

    @property
    def indexed(self) -> list[FileResult]:
        return self._with("indexed")

    @property
    def up_to_date(self) -> list[FileResult]:
        return self._with("up_to_date")

    @property
    def failed(self) -> list[FileResult]:
        return self._with("failed")

    @property
    def check_failed(self) -> list[FileResult]:
        """Indexes that do not follow the batch's ``check`` template."""
        return [r for r in self.results if r.check is not None and not r.check.get("ok")]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.check_failed and self.manifest_error is None

    def summary(self) -> str:
        rate = len(self.indexed) / self.seconds if self.seconds > 0 else 0.0
        return (f"{len(self.results)} inputs: {len(self.indexed)} indexed, {len(self.up_to_date)} up to date, "
                f"{len(self.failed)} failed"
                + (f", {len(self.check_failed)} not following the template" if self.check_failed else "")
                + f" in {self.seconds:.1f} s ({rate:.1f} files/s)"
                + (f"; manifest {self.manifest}" if self.manifest else "")
                + ("; no manifest written" if self.manifest_error else ""))

    def _repr_html_(self) -> str:
        """In a notebook: the summary, then one row per input (failed ones first)."""
        import html

        from ..feedback.display import table, verdict

        order = {"failed": 0, "indexed": 1, "up_to_date": 2}
        rows = [(r.source, r.status.replace("_", " "), r.index, r.arrays, r.chunks, r.seconds,
                 r.error or ("" if r.check is None else "follows the template" if r.check.get("ok")
                             else "does not follow the template"))
                for r in sorted(self.results, key=lambda r: order.get(r.status, 3))]
        note = f"manifest: <code>{html.escape(self.manifest)}</code>" if self.manifest else ""
        if self.combined:
            note += f"{'; ' if note else ''}combined index: <code>{html.escape(self.combined)}</code>"
        return table(["input", "status", "index", "arrays", "chunks", "seconds", "error / check"], rows,
                     title=verdict(self.ok, self.summary()), note=note)

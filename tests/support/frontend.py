"""A stand-in for the gateway's metrics in front-door tests: counts what the function
front door reports (`dataplane.frontdoor.CallObserver`)."""

from __future__ import annotations


class Recorder:
    """Counts what the frontend reports: calls started and answered per function, answers
    by status code, samples served."""

    def __init__(self) -> None:
        self.served_count = 0
        self.done: dict[int, int] = {}
        self.started: dict[str, int] = {}
        self.finished: dict[str, int] = {}

    def request_started(self, function: str) -> None:
        self.started[function] = self.started.get(function, 0) + 1

    def served(
        self,
        function: str,
        batch_size: int,
        queue_ms: float,
        exec_ms: float,
        cold_start: bool,
        cold_start_ms: float | None,
    ) -> None:
        self.served_count += 1

    def request_done(self, function: str, code: int, seconds: float) -> None:
        self.done[code] = self.done.get(code, 0) + 1
        self.finished[function] = self.finished.get(function, 0) + 1

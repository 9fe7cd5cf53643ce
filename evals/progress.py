"""A one-line progress bar on stderr for long commands (runs, sweeps, benches)."""

from __future__ import annotations

import math
import sys
import time


class Progress:
    """A one-line progress bar on stderr; silent when `quiet`. Without a TTY, plain
    lines: the first and last step, and one at most every `every_s` seconds."""

    def __init__(self, total: int, quiet: bool = False, label: str = "eval", every_s: float = 10.0):
        self.total, self.done, self.quiet, self.label = max(total, 1), 0, quiet, label
        self.every_s, self._last = every_s, -math.inf

    def step(self, what: str = "") -> None:
        self.done += 1
        if self.quiet:
            return
        if not sys.stderr.isatty():  # a log file or a pipe: plain periodic lines, no \r
            now = time.monotonic()
            if self.done in (1, self.total) or now - self._last >= self.every_s:
                self._last = now
                sys.stderr.write(f"{self.label} {self.done}/{self.total} {what}\n")
                sys.stderr.flush()
            return
        width = 24
        fill = int(width * self.done / self.total)
        bar = "#" * fill + "-" * (width - fill)
        sys.stderr.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {what[:40]:<40}")
        if self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()

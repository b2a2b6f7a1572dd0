"""The one error type users see: exit code 2 and one line naming file, key and problem;
and `duration`, how every command writes a time span."""

import math


class UserError(Exception):
    """Bad input from a user: printed as one line `file: key: problem`, exit code 2."""

    def __init__(self, problem: str, file: str | None = None, key: str | None = None):
        self.file, self.key, self.problem = file, key, problem
        super().__init__(": ".join(str(p) for p in (file, key, problem) if p))


def duration(seconds: float | None) -> str:
    """`1h05m`, `4m10s`, `12s`; `-` when unknown (progress, status, train)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"

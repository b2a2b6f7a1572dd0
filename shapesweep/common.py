"""The one error type users see: exit code 2 and one line naming file, key and problem."""


class UserError(Exception):
    """Bad input from a user: printed as one line `file: key: problem`, exit code 2."""

    def __init__(self, problem: str, file: str | None = None, key: str | None = None):
        self.file, self.key, self.problem = file, key, problem
        super().__init__(": ".join(str(p) for p in (file, key, problem) if p))

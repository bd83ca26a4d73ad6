"""The one exception type users see: a one-line message that names the file and the problem."""

from __future__ import annotations


class GraphfixError(Exception):
    """A problem with the user's input or settings (exit code 2), as opposed to a bug in graphfix."""

    exit_code = 2

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)

"""The one exception type users see: a one-line message that names the file and the problem."""

from __future__ import annotations


class GraphfixError(Exception):
    """A problem with the user's input or settings (exit code 2), as opposed to a bug in graphfix."""

    exit_code = 2

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


def visible(text: object) -> str:
    """Text with every character a terminal or renderer would act on written as its escape
    (``\\x1b``, ``\\x00``, ``\\r``, ``\\n``, ``\\u202e``): a tensor name is free text, and printed raw
    it can recolour the terminal, set its title, clear the screen or start a new line."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def cut(text: str, limit: int) -> str:
    """At most ``limit`` characters: the start, an ellipsis and how long the whole was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text)} characters)"

"""The exception types users see: a one-line message that names the file and the problem."""

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


class OnnxruntimeDied(BaseException):  # noqa: N818 - like KeyboardInterrupt, it ends the run
    """onnxruntime crashed or outlasted the time budget in graphfix's worker process
    (graphfix.runtime.worker). Exit code 2 like a GraphfixError, but a BaseException: the
    pipeline's ``except Exception`` fallbacks (onnxruntime's default settings, the next candidate
    shape, pass by pass) would only crash or wait again."""

    exit_code = 2

    def __init__(self, what: str, path: str | None = None) -> None:
        super().__init__(what)
        self.what, self.path = what, path

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{where}{self.what}; --no-verify skips verification"


class OverMemoryBudget(OnnxruntimeDied):
    """An onnxruntime run in the worker needed more than ``--max-memory`` (its allocation failed
    there): the run ends like a crash, except in the shape search, where that candidate is not used."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()

"""The root of pictrieve's own exceptions.

Every error we raise on purpose derives from :class:`PictrieveError` and carries a message that
says what to do, so the CLI can print it as one line instead of a traceback.
"""

from typing import Iterator


class PictrieveError(Exception):
    """An anticipated failure with an actionable message.

    ``fix`` (optional) is the advice for a Python caller, kept apart from the ``problem`` so that
    the command line can replace it with its own (a flag instead of a keyword argument); the
    message, ``str(error)``, is ``"<problem>; <fix>"``.
    """

    def __init__(self, problem: str = "", *args: object, fix: str | None = None) -> None:
        super().__init__(f"{problem}; {fix}" if fix else problem, *args)
        self.problem = problem
        self.fix = fix


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during (``__cause__``, else ``__context__``), outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__

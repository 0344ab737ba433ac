"""The root of pictrieve's own exceptions.

Every error we raise on purpose derives from :class:`PictrieveError` and carries a message that
says what to do, so the CLI can print it as one line instead of a traceback.
"""


class PictrieveError(Exception):
    """An anticipated failure with an actionable message."""

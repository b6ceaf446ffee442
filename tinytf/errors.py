"""The one exception type for mistakes a user can make.

Anything raised as a `UserError` is the user's to fix (a bad config key, a missing
file, an unknown token...). The CLI prints its message on one line and exits with
code 2; it never shows a traceback for these. Bugs stay ordinary exceptions.
"""

EXIT_INTERRUPTED = 130  # the shell's convention for "stopped by Ctrl-C"


class UserError(Exception):
    """A mistake in the user's input, explained in one line."""


class ConfigError(UserError):
    """An invalid config file, key or value."""


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (or its type, if it has none), for
    quoting a library's long error inside one line of ours."""
    message = str(err).strip()
    return message.splitlines()[0] if message else type(err).__name__

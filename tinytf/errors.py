"""The one exception type for mistakes a user can make.

Anything raised as a `UserError` is the user's to fix (a bad config key, a missing
file, an unknown token...). The CLI prints its message on one line and exits with
code 2; it never shows a traceback for these. Bugs stay ordinary exceptions, and so
does `NotApplicableError`: code that calls a method where it does not apply.
"""

import difflib
from collections.abc import Iterable

EXIT_INTERRUPTED = 130  # the shell's convention for "stopped by Ctrl-C"
EXIT_WRITE_FAILED = 3  # a sweep worker that could not write (a full disk): its error is on stderr


class UserError(Exception):
    """A mistake in the user's input, explained in one line."""


class ConfigError(UserError):
    """An invalid config file, key or value."""


class NotApplicableError(NotImplementedError):
    """A method called where it does not apply (a language model's framing asked for
    answers to questions); the message says why, and what applies instead."""


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (or its type, if it has none), for
    quoting a library's long error inside one line of ours."""
    message = str(err).strip()
    return message.splitlines()[0] if message else type(err).__name__


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`"; did you mean 'subject'?"`: the choice nearest a mistyped `name` (difflib's
    measure, as config keys and task names are suggested), or "" when none is near."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""

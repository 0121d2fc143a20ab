"""User-facing errors: one line, naming the file, key or node at fault, and an exit code."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input (config, file, data). The CLI prints ``str(self)`` on
    one line and exits with :attr:`exit_code`; no traceback unless HYDRA_FULL_ERROR=1."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class PassNotApplicable(Exception):
    """An optimize pass cannot handle this graph: it crashed, or its output is invalid or
    uses op domains its input did not. The stage skips the pass on this model and reports
    why; the model stays the verified one from before the pass."""


class UserStop(BaseException):
    """Carries a :class:`UserError` through code that turns every ``Exception`` into a
    warning (Hydra's callbacks): the CLI unwraps it and prints the one line."""

    def __init__(self, error: UserError) -> None:
        self.error = error
        super().__init__(str(error))

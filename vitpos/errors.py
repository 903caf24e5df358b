"""The one error type a user sees: a bad input, printed as one line by every vitpos command (exit status 2).

A leaf module: it imports nothing of vitpos, so the model, the data and the commands can all raise it."""


class ConfigError(ValueError):
    """A user-facing problem with an input (a flag, a file, a checkpoint); its message is printed as one line."""

"""The one error tree of Swapless.

A `KnownError` is a fault of the environment or of the user's input (a broken model
folder, a full disk, a prompt that cannot fit): its message is written for the user and
shown as-is by the CLI and the UI. Anything else that escapes is a bug and is reported
with its traceback.
"""


class KnownError(Exception):
    """An expected failure whose message is meant for the user."""


class ModelLoadError(KnownError):
    """A model folder is missing, incomplete, corrupt or of an unknown architecture."""


class BudgetError(KnownError):
    """A model or a request does not fit in the memory budget or the context limit."""


class StoreError(KnownError):
    """The conversation database cannot be opened, read or written."""


class SettingsError(KnownError):
    """A setting or preset has an unknown key or an invalid value."""


class InputError(KnownError):
    """A file or argument given by the user cannot be used (e.g. a binary document)."""


class ToolServerError(KnownError):
    """A tool (MCP) server is misconfigured, fails to start, dies, or times out."""

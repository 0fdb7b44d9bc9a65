"""The trace store's one error type (in its own module so the store's read and write halves share it)."""


class TraceStoreError(RuntimeError):
    """A trace database problem a user can act on (missing file, unknown id, episode already finished)."""

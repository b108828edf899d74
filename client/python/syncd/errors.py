"""Exceptions raised by syncd's Python packages."""


class SyncdError(RuntimeError):
    """A collective or the daemon failed. `status` is the C client's status name, e.g.
    'SYNCD_ERR_MISMATCH' or 'SYNCD_ERR_RANK_LOST'."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status

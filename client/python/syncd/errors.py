"""Exceptions raised by syncd's Python packages."""


class SyncdError(RuntimeError):
    """A collective or the daemon failed. `status` is the C client's status name
    (syncd_status_name), e.g. 'MISMATCH', 'RANK_LOST' or 'DAEMON_LOST'."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class HorovodInternalError(SyncdError):
    """A collective failed (syncd.torch's synchronize and blocking calls raise it, as Horovod's)."""

    def __init__(self, error):
        super().__init__(str(error), getattr(error, "status", None))


class NotSupportedError(ValueError, NotImplementedError):
    """A reduction or argument syncd does not take, refused at the call (reducescatter with
    Adasum or Max, DistributedOptimizer(op=Adasum) with a process set). Horovod raises errors that `except RuntimeError` catches for
    these; syncd raised ValueError before. This class is both, so handlers written for either
    keep working (NotImplementedError is a RuntimeError)."""

"""Gradient compression for allreduce, as horovod.torch.Compression.

Compression.fp16 and Compression.bf16 on host float32/float64 tensors are done by the daemons, on
their own cores and on the inter-node hop only: the ranks of a node reduce exactly, the sum
crosses the nodes in half precision and comes back in the tensor's dtype (under --coord topo too:
the plan carries each tensor's compression). Elsewhere (CUDA tensors, other dtypes) the framework
process casts before and after, as Horovod does. Compression.topk(ratio), Compression.onebit and
Compression.powersgd(rank) (syncd's) keep error feedback in the daemons: host float tensors only.
Compression.randomk is withdrawn: it raises ValueError saying why."""
import torch


# syncd_compression (syncd/client.h).
DAEMON_DEFAULT, NONE, FP16, BF16, TOPK, RANDOMK, ONEBIT, POWERSGD = 0, 1, 2, 3, 4, 5, 6, 7


class Compressor:
    # The syncd_compression the daemon applies in its place, or None: compress/decompress run here.
    daemon = None

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    """Floating-point tensors travel as `wire` and come back in their own dtype."""
    wire = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(cls.wire), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx is not None and ctx.is_floating_point else tensor


class FP16Compressor(_CastCompressor):
    wire = torch.float16
    daemon = FP16


class BF16Compressor(_CastCompressor):
    wire = torch.bfloat16
    daemon = BF16


class _FeedbackCompressor(NoneCompressor):
    """Error feedback needs the daemons' residuals: done by them on host float32/float64 tensors
    only; anywhere else the tensor travels uncompressed."""


def _feedback(name, method, ratio):
    if ratio is None:
        ppm = 0  # the daemons' --compression-ratio
    elif not 0 < ratio <= 1:
        raise ValueError("Compression.%s(ratio=%r): the ratio must be in (0, 1]" % (name, ratio))
    else:
        ppm = max(1, round(ratio * 1e6))
    # The binding's encoding: the method in the low 8 bits, the ratio in parts per million above.
    return type("%sCompressor" % name, (_FeedbackCompressor,), {"daemon": method | (ppm << 8), "ratio": ratio})


class OneBitCompressor(_FeedbackCompressor):
    daemon = ONEBIT


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
    # syncd's, with error feedback kept by the daemons (per tensor name, bounded by
    # --compression-residual-bytes, dropped when the job ends or its membership changes).
    onebit = OneBitCompressor

    @staticmethod
    def topk(ratio=None):
        """Each node sends its largest `ratio` of the elements (default: the daemons' --compression-ratio)."""
        return _feedback("topk", TOPK, ratio)

    @staticmethod
    def randomk(ratio=None):
        """Withdrawn: random-k with error feedback does not train under momentum (docs/pages/compression.md)."""
        raise ValueError("Compression.randomk(%r): random-k compression is withdrawn: with error feedback it does not "
                         "train under momentum (the digits network with SGD momentum 0.9 ended in NaN or at chance at "
                         "ratios 0.01 to 0.25); use Compression.topk(%r), which trains within a point of "
                         "uncompressed" % (ratio, ratio))

    @staticmethod
    def powersgd(rank=None):
        """PowerSGD: a tensor of two or more dimensions (its first dimension's rows by the rest)
        travels as two factors of `rank` columns (default: the daemons' --compression-rank); others
        as they are."""
        if rank is None:
            code = 0
        elif isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= 1024:
            raise ValueError("Compression.powersgd(rank=%r): the rank must be a whole number in [1, 1024]" % (rank,))
        else:
            code = rank
        return type("powersgdCompressor", (_FeedbackCompressor,), {"daemon": POWERSGD | (code << 8), "rank": rank})


def daemon_compression(compression, tensor):
    """The syncd_compression the daemons apply to an allreduce of `tensor`, or DAEMON_DEFAULT (the
    daemon's --compression) where `compression` runs in this process (compress/decompress) or is
    none."""
    if (getattr(compression, "daemon", None) is None or tensor.is_cuda
            or tensor.dtype not in (torch.float32, torch.float64)):
        return DAEMON_DEFAULT
    return compression.daemon

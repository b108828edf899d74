"""hvd.SyncBatchNorm: batch normalization whose statistics are those of the whole batch, every
rank's samples together (as horovod.torch.SyncBatchNorm).

In training each forward allreduces, per channel, the sum and the sum of squares of this rank's
samples and their count (one allreduce of 2C + 1 values). Mean and variance are those of the
concatenated batch; the backward pass needs no code of its own: the allreduce is differentiable
(its gradient is the allreduce of the gradient), so autograd gives every rank the gradient of the
sum of all ranks' losses, exactly BatchNorm's over the concatenated batch. In eval mode, or with a
single rank, it is torch's BatchNorm.
"""
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from syncd.torch.inplace_ops import Sum, allreduce
from syncd.torch.process_sets import global_process_set, set_size


class SyncBatchNorm(_BatchNorm):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def _run_bn(self, input):
        return super().forward(input)

    def forward(self, input):
        self._check_input_dim(input)
        ps = None if self.process_set is global_process_set else self.process_set
        if not self.training or set_size(ps) == 1:
            return self._run_bn(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        channels = input.size(1)
        dims = [0] + list(range(2, input.dim()))
        x = input if input.dtype in (torch.float32, torch.float64) else input.float()
        count = torch.tensor([x.numel() // channels], dtype=x.dtype, device=x.device)
        local = torch.cat([x.sum(dims), (x * x).sum(dims), count])
        total = allreduce(local, op=Sum, name=None, process_set=self.process_set)
        n = total[-1]
        mean = total[:channels] / n
        var = total[channels:2 * channels] / n - mean * mean  # biased, as BatchNorm normalizes with
        if self.track_running_stats:
            with torch.no_grad():
                self.running_mean.mul_(1 - factor).add_(mean.detach().to(self.running_mean.dtype), alpha=factor)
                unbiased = var.detach() * n.detach() / max(float(n.detach()) - 1, 1.0)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)
        shape = [1, channels] + [1] * (input.dim() - 2)
        out = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out.to(input.dtype)

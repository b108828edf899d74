"""syncd: a per-node communication daemon for data-parallel training.

Framework processes attach to their node's `syncd` over shared memory. `syncd.torch` offers
Horovod's PyTorch API on top of it: change `import horovod.torch as hvd` to
`import syncd.torch as hvd`.
"""
from syncd.errors import SyncdError

__all__ = ["SyncdError"]
__version__ = "0.1.0"

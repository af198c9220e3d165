"""One torch thread for a block of code, restored afterwards.

On these shared 2-core machines torch's intra-op pool hurts work made of many small tensor ops, and it fights any
thread of our own (a hashing thread, say): its idle workers spin. Used where that was measured to matter.
"""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def single_torch_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)

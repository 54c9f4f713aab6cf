"""Log-sum-exp over the last axis of a (batch, dim) matrix.

Family: reduction
"""
import torch
import torch.nn as nn

batch_size = 8192
dim = 32771

SMALL_SHAPES = {"batch_size": 5, "dim": 300}


class Model(nn.Module):
    """y[i] = log(sum_j exp(x[i, j])), computed stably; output shape (batch,)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

"""Index of the minimum over the last axis of a (batch, dim1, dim2) tensor.

Family: argreduce
"""
import torch
import torch.nn as nn

batch_size = 128
dim1 = 1023
dim2 = 2049

SMALL_SHAPES = {"batch_size": 3, "dim1": 5, "dim2": 37}


class Model(nn.Module):
    """y[b, j] = argmin_k x[b, j, k] as int64 (first index on ties); output shape (batch, dim1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmin(x, dim=2)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []

"""Index of the maximum over the middle axis of a (batch, dim1, dim2) tensor.

Family: argreduce
"""
import torch
import torch.nn as nn

batch_size = 64
dim1 = 4093
dim2 = 1023

SMALL_SHAPES = {"batch_size": 3, "dim1": 37, "dim2": 11}


class Model(nn.Module):
    """y[b, k] = argmax_j x[b, j, k] as int64 (first index on ties); output shape (batch, dim2)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []

"""Sum over the middle axis of a (batch, dim1, dim2) tensor, keeping that axis as size 1.

Family: reduction
"""
import torch
import torch.nn as nn

batch_size = 64
dim1 = 4093
dim2 = 2047

SMALL_SHAPES = {"batch_size": 3, "dim1": 37, "dim2": 19}


class Model(nn.Module):
    """y[b, 0, k] = sum_j x[b, j, k]; output shape (batch, 1, dim2)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []

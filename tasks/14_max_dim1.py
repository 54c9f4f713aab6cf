"""Maximum over the middle axis of a (batch, dim1, dim2) tensor (values only).

Family: reduction
"""
import torch
import torch.nn as nn

batch_size = 128
dim1 = 4095
dim2 = 511

SMALL_SHAPES = {"batch_size": 3, "dim1": 37, "dim2": 11}


class Model(nn.Module):
    """y[b, k] = max_j x[b, j, k]; output shape (batch, dim2)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []

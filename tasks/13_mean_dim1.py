"""Mean over a short middle axis of a (batch, dim1, dim2) tensor with a long inner axis.

Family: reduction
"""
import torch
import torch.nn as nn

batch_size = 16
dim1 = 257
dim2 = 65535

SMALL_SHAPES = {"batch_size": 2, "dim1": 5, "dim2": 300}


class Model(nn.Module):
    """y[b, k] = mean_j x[b, j, k]; output shape (batch, dim2)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []

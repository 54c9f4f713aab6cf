"""Swish plus a per-column bias: y = x * sigmoid(x) + bias, on a (rows, dim) matrix.

Family: elementwise
"""
import torch
import torch.nn as nn

rows = 8192
dim = 32771

SMALL_SHAPES = {"rows": 5, "dim": 300}


class Model(nn.Module):
    """y[i, j] = x[i, j] * sigmoid(x[i, j]) + bias[j]; bias is a learned (dim,) vector."""

    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) + self.bias


def get_inputs():
    return [torch.randn(rows, dim)]


def get_init_inputs():
    return [dim]

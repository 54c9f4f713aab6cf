"""GELU (exact, erf form) applied elementwise to a (batch, dim) matrix.

Family: elementwise
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16384
dim = 16381

SMALL_SHAPES = {"batch_size": 5, "dim": 37}


class Model(nn.Module):
    """y = 0.5 * x * (1 + erf(x / sqrt(2)))."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

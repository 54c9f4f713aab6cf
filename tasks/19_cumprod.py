"""Inclusive prefix product along the last axis of a (batch, length) matrix.

Family: scan

Inputs are +-(1 + 0.01 * noise) with random signs, so running products stay of order one (neither
underflowing to zero nor overflowing) and change sign along the row.
"""
import torch
import torch.nn as nn

batch_size = 32768
length = 4093

SMALL_SHAPES = {"batch_size": 5, "length": 300}


class Model(nn.Module):
    """y[i, j] = prod_{k <= j} x[i, k]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=1)


def get_inputs():
    sign = torch.where(torch.rand(batch_size, length) < 0.5, -1.0, 1.0)
    return [sign * (1.0 + 0.01 * torch.randn(batch_size, length))]


def get_init_inputs():
    return []

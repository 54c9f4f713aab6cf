"""Prefix sum along the last axis counting only the elements where a boolean mask is set.

Family: scan
"""
import torch
import torch.nn as nn

batch_size = 16384
length = 8191

SMALL_SHAPES = {"batch_size": 5, "length": 300}


class Model(nn.Module):
    """y[i, j] = sum_{k <= j, mask[i, k]} x[i, k]; mask is a bool tensor of x's shape."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x * mask, dim=1)


def get_inputs():
    x = torch.randn(batch_size, length)
    mask = torch.randint(0, 2, (batch_size, length)).bool()
    return [x, mask]


def get_init_inputs():
    return []

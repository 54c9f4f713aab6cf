"""Softmax over the last axis of a (batch, dim) matrix.

Family: softmax
"""
import torch
import torch.nn as nn

batch_size = 16384
dim = 16381

SMALL_SHAPES = {"batch_size": 5, "dim": 300}


class Model(nn.Module):
    """y[i, :] = exp(x[i, :] - max_j x[i, j]) / sum_j exp(x[i, j] - max_j x[i, j])."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

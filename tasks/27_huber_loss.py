"""Mean Huber loss (delta 1) between two (batch, dim) matrices.

Family: loss
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 32771

SMALL_SHAPES = {"batch_size": 5, "dim": 37}


class Model(nn.Module):
    """d = predictions - targets; loss = mean(0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta))."""

    def __init__(self, delta: float = 1.0):
        super().__init__()
        self.delta = delta

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.huber_loss(predictions, targets, delta=self.delta)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

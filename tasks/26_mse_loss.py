"""Mean squared error between two (batch, dim) matrices.

Family: loss
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16384
dim = 16381

SMALL_SHAPES = {"batch_size": 5, "dim": 37}


class Model(nn.Module):
    """loss = mean((predictions - targets)^2) over all elements; a 0-d tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

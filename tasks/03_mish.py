"""Mish, x * tanh(softplus(x)), applied elementwise to an NCHW activation tensor.

Family: elementwise
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
channels = 128
height = 255
width = 257

SMALL_SHAPES = {"batch_size": 2, "channels": 3, "height": 5, "width": 7}


class Model(nn.Module):
    """y = x * tanh(log(1 + exp(x))); softplus switches to the identity above x = 20."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mish(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []

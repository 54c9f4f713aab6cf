"""Instance norm of an NCHW tensor: each (sample, channel) plane normalized over its H*W values, no affine.

Family: norm
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 64
height = 383
width = 383

SMALL_SHAPES = {"batch_size": 2, "channels": 3, "height": 9, "width": 13}


class Model(nn.Module):
    """y[n, c] = (x[n, c] - mean(x[n, c])) / sqrt(var(x[n, c]) + eps), biased variance."""

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.instance_norm(x, eps=self.eps)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []

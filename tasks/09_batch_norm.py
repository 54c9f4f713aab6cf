"""Batch norm of an NCHW tensor, inference-style: fixed running statistics, learned per-channel affine.

Family: norm

The forward uses the stored running mean and variance (training=False) and updates nothing; the
running statistics are random but fixed at construction, so a kernel must really read them.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
channels = 64
height = 257
width = 255

SMALL_SHAPES = {"batch_size": 2, "channels": 3, "height": 5, "width": 7}


class Model(nn.Module):
    """y = (x - running_mean[c]) / sqrt(running_var[c] + eps) * weight[c] + bias[c]."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels))
        self.bias = nn.Parameter(torch.randn(channels))
        self.register_buffer("running_mean", torch.randn(channels) * 0.5)
        self.register_buffer("running_var", torch.rand(channels) + 0.5)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training=False, eps=self.eps)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]

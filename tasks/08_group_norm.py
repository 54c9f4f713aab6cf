"""Group norm of an NCHW tensor (statistics per sample and channel group), with learned per-channel affine.

Family: norm
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 96
num_groups = 12
height = 255
width = 255

SMALL_SHAPES = {"batch_size": 2, "channels": 6, "num_groups": 3, "height": 5, "width": 7}


class Model(nn.Module):
    """Each (sample, group of channels/num_groups channels) is normalized to zero mean and unit variance,
    then scaled and shifted per channel."""

    def __init__(self, num_groups: int, channels: int, eps: float = 1e-5):
        super().__init__()
        self.num_groups = num_groups
        self.weight = nn.Parameter(torch.randn(channels))
        self.bias = nn.Parameter(torch.randn(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]

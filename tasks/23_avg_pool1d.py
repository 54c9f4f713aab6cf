"""1-D average pooling (window 4, stride 2, padding 1, padding counted) of an (N, C, L) tensor.

Family: pooling
"""
import torch
import torch.nn as nn

batch_size = 64
channels = 128
length = 32771
kernel_size = 4
stride = 2
padding = 1

SMALL_SHAPES = {"batch_size": 2, "channels": 3, "length": 37}


class Model(nn.Module):
    """y[n, c, i] = sum of x[n, c] over [i*stride - padding, i*stride - padding + kernel_size) / kernel_size,
    zero-padded positions included in the count."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [kernel_size, stride, padding]

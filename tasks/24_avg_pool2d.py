"""2-D average pooling (non-overlapping 3x3 windows, no padding) of an NCHW tensor.

Family: pooling
"""
import torch
import torch.nn as nn

batch_size = 16
channels = 64
height = 513
width = 511
kernel_size = 3

SMALL_SHAPES = {"batch_size": 2, "channels": 3, "height": 11, "width": 14}


class Model(nn.Module):
    """y[n, c, i, j] = mean of the 3x3 block of x[n, c] starting at (3i, 3j); trailing rows and columns
    that do not fill a window are dropped."""

    def __init__(self, kernel_size: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size]

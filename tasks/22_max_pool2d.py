"""2-D max pooling (3x3 window, stride 2, padding 1) of an NCHW tensor.

Family: pooling
"""
import torch
import torch.nn as nn

batch_size = 16
channels = 64
height = 511
width = 509
kernel_size = 3
stride = 2
padding = 1

SMALL_SHAPES = {"batch_size": 2, "channels": 3, "height": 11, "width": 13}


class Model(nn.Module):
    """y[n, c, i, j] = max of x[n, c] over the window at (i*stride - padding, j*stride - padding);
    padded positions never win. Output (N, C, (H + 2p - k) // s + 1, (W + 2p - k) // s + 1)."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]

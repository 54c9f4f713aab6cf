"""Depthwise 2-D convolution (3x3, stride 1, padding 1, with bias) of an NCHW tensor.

Family: conv
"""
import torch
import torch.nn as nn

batch_size = 16
channels = 64
height = 511
width = 509
kernel_size = 3
stride = 1
padding = 1

SMALL_SHAPES = {"batch_size": 2, "channels": 3, "height": 11, "width": 13}


class Model(nn.Module):
    """Each channel is convolved (cross-correlated) with its own kernel_size x kernel_size filter:
    y[n, c] = conv2d(x[n, c], w[c]) + b[c]; groups = channels."""

    def __init__(self, channels: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, stride=stride, padding=padding,
                              groups=channels, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size, stride, padding]

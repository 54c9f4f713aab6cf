"""Mean cross-entropy loss of (batch, num_classes) logits against integer class targets.

Family: loss
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32768
num_classes = 8191

SMALL_SHAPES = {"batch_size": 5, "num_classes": 37}


class Model(nn.Module):
    """loss = mean_i (logsumexp(logits[i, :]) - logits[i, targets[i]]); a 0-d tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []

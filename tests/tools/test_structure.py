"""The evaluator's structure check: a candidate returns what the reference returns, the same nesting of tensors.
A namedtuple counts by its name and fields, since the candidate's copy of the task's class is another object."""
from collections import namedtuple

import pytest
import torch

from tools.verify import Failed, _check_structure


def test_a_namedtuple_is_the_same_by_name_and_fields_and_nothing_else_is():
    ours, theirs = namedtuple("Stats", ["mean", "spread"]), namedtuple("Stats", ["mean", "spread"])
    x = torch.ones(2)
    _check_structure(ours(x, x), theirs(x, x))
    for wrong in ((x, x), namedtuple("Stats", ["mean", "max"])(x, x), namedtuple("Other", ["mean", "spread"])(x, x),
                  ours(x, (x,)), [x, x]):
        with pytest.raises(Failed, match="where the reference returns"):
            _check_structure(wrong, theirs(x, x))

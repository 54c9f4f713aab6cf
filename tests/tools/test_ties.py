"""Ties in sorts and selections (tools/ties.py): PyTorch picks its own index among equal values; the evaluator
also accepts the reference's answer with ties broken by index, and nothing else."""
import pytest
import torch

from tools.compare import TOLERANCES, Failed
from tools.ties import IndexOrder
from tools.verify import Checked, Setup, judge

NAN = float("nan")
ROWS = torch.tensor([[1.0, 3, 3, 2, 3, NAN, 1, NAN], [2, 2, 2, 2, 1, 1, 1, 1], [4, 1, 4, 1, 4, 1, 4, 1]])


class TopThree(torch.nn.Module):
    def forward(self, x):
        return torch.topk(x, 3, dim=1)


def test_each_op_breaks_its_ties_by_index_and_keeps_pytorch_s_values():
    with IndexOrder():
        top, low = torch.topk(ROWS, 3), torch.topk(ROWS, 3, largest=False)
        order = torch.sort(ROWS, dim=1, descending=True)
        kth, median, nanmedian = torch.kthvalue(ROWS, 2, 1), torch.median(ROWS, 1), torch.nanmedian(ROWS, 1)
    assert top.indices.tolist() == [[5, 7, 1], [0, 1, 2], [0, 2, 4]]
    assert low.indices.tolist() == [[0, 6, 3], [4, 5, 6], [1, 3, 5]]
    assert order.indices.tolist()[2] == [0, 2, 4, 6, 1, 3, 5, 7]
    assert kth.indices.tolist() == [6, 5, 3] and median.indices.tolist() == [5, 7, 7]
    assert nanmedian.indices.tolist() == [3, 7, 7]
    for mine, theirs in [(top, torch.topk(ROWS, 3)), (order, torch.sort(ROWS, dim=1, descending=True)),
                         (median, torch.median(ROWS, 1)), (nanmedian, torch.nanmedian(ROWS, 1))]:
        assert torch.equal(mine.values.nan_to_num(7), theirs.values.nan_to_num(7))


def _judged(indices: torch.Tensor, reference_ops: list[str]) -> None:
    model = TopThree()
    setup = Setup(None, model, None, torch.device("cpu"), None, TOLERANCES[torch.float32], [], None)
    expected = model(ROWS)
    judge(setup, [ROWS], (expected.values, indices), expected, Checked(reference_ops=reference_ops))


def test_indices_in_index_order_pass_where_pytorch_chose_otherwise():
    ordered = torch.tensor([[5, 7, 1], [0, 1, 2], [0, 2, 4]])
    assert not torch.equal(torch.topk(ROWS, 3).indices, ordered)  # this CPU's topk orders these ties its own way
    _judged(ordered, ["aten.topk"])
    with pytest.raises(Failed, match="output 1 differs"):  # only where the reference ran an op that has ties
        _judged(ordered, ["aten.amax"])


def test_any_other_order_of_the_ties_fails():
    with pytest.raises(Failed, match="output 1 differs") as e:
        _judged(torch.tensor([[7, 5, 2], [2, 1, 0], [6, 4, 2]]), ["aten.topk"])  # the same values
    assert "index" not in str(e.value)  # PyTorch's answer is the one the failure describes

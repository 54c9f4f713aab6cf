"""Selection policies on hand-built archives: greedy, UCB over the lineage, MAP-Elites cells."""
import pytest

from agent.interfaces import Individual
from agent.policies import GreedyPolicy, MapElitesPolicy, TreePolicy, kernel_features, make_policy
from tools.results import EvalResult, Timing


def _ind(i: int, ms: float | None, parent: int | None = None, features: dict | None = None,
         source: str = "") -> Individual:
    if ms is None:
        result = EvalResult("incorrect", "Incorrect: wrong values.")
    else:
        t = Timing(ms, None, None, None, None, None, None, 1.0, True)
        result = EvalResult("correct", "ok", timing=t)
    return Individual(i, source or f"src{i}", "template", parent, features=features or {}, result=result)


def test_greedy_takes_the_fastest_and_with_nothing_correct_the_newest():
    archive = [_ind(1, 3.0), _ind(2, 1.0), _ind(3, None), _ind(4, 2.0)]
    assert [i.id for i in GreedyPolicy().select(archive, 2)] == [2, 4]
    failed = [_ind(1, None), _ind(2, None), _ind(3, None)]
    assert [i.id for i in GreedyPolicy().select(failed, 2)] == [3, 2]
    assert GreedyPolicy().select([], 2) == []


def test_tree_prefers_the_subtree_that_keeps_paying_off():
    # root 1 has two children; 2's line keeps improving, 3's children all failed
    archive = [_ind(1, 4.0), _ind(2, 2.0, 1), _ind(3, 3.9, 1), _ind(4, 1.0, 2), _ind(5, None, 3),
               _ind(6, None, 3), _ind(7, None, 3)]
    tree = TreePolicy(exploration=0.5)
    scores = tree.scores(archive)
    assert scores[2] > scores[3]  # same exploration order of magnitude, much better mean reward
    assert scores[4] > scores[5]  # the best leaf beats a failed leaf with the same visit count
    assert tree.select(archive, 1)[0].id == 4


def test_tree_exploration_bonus_lifts_a_rarely_visited_root():
    # root 1 (fast) has been expanded ten times; root 12 (slower) never
    archive = [_ind(1, 1.0)] + [_ind(i, 1.0, 1) for i in range(2, 12)] + [_ind(12, 2.0)]
    exploit = TreePolicy(exploration=0.0).scores(archive)
    explore = TreePolicy(exploration=2.0).scores(archive)
    assert exploit[1] > exploit[12]
    assert explore[12] > explore[1]


def test_map_elites_keeps_one_elite_per_behaviour_cell():
    a = {"access": "one_pass", "block_class": "small", "launches": 1, "tensor_cores": False}
    b = {**a, "block_class": "large"}
    archive = [_ind(1, 3.0, features=a), _ind(2, 1.0, features=a), _ind(3, 9.0, features=b), _ind(4, None, features=b)]
    policy = MapElitesPolicy(seed=1)
    elites = policy.elites(archive)
    assert sorted(i.id for i in elites.values()) == [2, 3]  # the slow 3 survives: it is alone in its cell
    assert sorted(i.id for i in policy.select(archive, 5)) == [2, 3]
    picks = {policy.select(archive, 1)[0].id for _ in range(30)}
    assert picks == {2, 3}  # both cells get chosen as parents


def test_map_elites_reads_cells_from_source_when_the_operator_gave_none():
    src = "k[grid](x, BLOCK=128)"
    given = Individual(1, src, "template", None, features={"access": "one_pass", "block_class": "medium",
                                                             "launches": 1, "tensor_cores": False})
    read = Individual(2, src, "llm", None)
    assert MapElitesPolicy.cell(given) == MapElitesPolicy.cell(read) == ("one_pass", "medium", "1", "False")


def test_map_elites_with_nothing_correct_returns_the_newest():
    assert [i.id for i in MapElitesPolicy().select([_ind(1, None), _ind(2, None)], 1)] == [2]


def test_kernel_features_read_from_source():
    src = '''
@triton.jit
def k(x_ptr, BLOCK_SIZE: tl.constexpr):
    acc = tl.dot(a, b)
def forward(x):
    k[grid](x, BLOCK_SIZE=2048)
    k2[(n,)](x, BLOCK_SIZE=32)
'''
    assert kernel_features(src) == {"access": "tiled_gemm", "block_class": "large", "launches": 2,
                                    "tensor_cores": True}
    looped = "for start in range(0, n, BLOCK):\n    pass\nk[grid](p, BLOCK=64)"
    assert kernel_features(looped) == {"access": "looped", "block_class": "small", "launches": 1,
                                       "tensor_cores": False}


def test_make_policy_names():
    assert make_policy("greedy").name == "greedy"
    assert make_policy("tree").name == "tree"
    assert make_policy("map-elites", seed=3).name == "map-elites"
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("random")

"""Issue 25 under symmflow.torch: eager collectives whose ranks disagree raise on every rank naming
the field, subgroups are resolved by their members only, a peer that left is named at once, eager
barrier runs, float8 conversions are left to PyTorch node by node, and the timeout default is the
C++ table's (torchrun on CPU over gloo; trust_worker.py is one rank); and sizes that overflow are
refused at the Python and torch entries (issue 39 item 5)."""
from __future__ import annotations

import json
import os

import pytest
import torch

import symmflow
import symmflow.torch as sft
from test_torchrun import launch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "trust_worker.py")
ENV = {"SYMMFLOW_TIMEOUT_S": "20"}


def _results(nproc, case, timeout=180):
    rc, results, out = launch(nproc, case, worker=WORKER, env=ENV, timeout=timeout)
    assert len(results) == nproc, out[-6000:]
    bad = [r for r in results if not r["ok"]]
    assert not bad, json.dumps(results, indent=1)[-6000:]
    return results


@pytest.mark.parametrize("nproc", [2, 3])
def test_eager_collectives_whose_ranks_disagree_raise_on_every_rank(nproc):
    _results(nproc, "disagree")


def test_a_subgroup_is_resolved_by_its_members_alone():
    _results(4, "subgroup")


def test_a_peer_that_finished_is_named_at_once():
    results = _results(2, "finished")
    assert next(r for r in results if r["rank"] == 0)["seconds"] < 10


def test_an_uncaught_exception_is_named_as_a_failure_not_a_finish():
    """Issue 39 item 9: the peers of a rank that died of an uncaught Python exception read its
    text (Note [poisoned groups]), at once."""
    rc, results, out = launch(2, "uncaught", worker=WORKER, env=ENV, timeout=180)
    mine = [r for r in results if r["rank"] == 0]
    assert len(mine) == 1, out[-6000:]
    assert mine[0]["ok"], json.dumps(mine[0], indent=1)
    assert rc != 0  # rank 1 died of its exception


def test_a_third_process_can_neither_read_nor_poison_the_store_keys():
    """Issue 39 item 7 (Note [sealed store values])."""
    _results(2, "attacker")


def test_a_compiled_graph_on_a_poisoned_group_raises_and_a_new_group_recovers():
    """Issue 39: compiled calls after a failed collective of their group raise; a new c10d group
    of the same ranks recovers with right results."""
    _results(2, "compiled_recovery")


def test_a_compiled_graph_after_a_timeout_raises_at_every_call_and_a_new_group_recovers():
    """Issue 39 item 2 under torch.compile: 5 of 6 retries after a Timeout returned wrong sums."""
    rc, results, out = launch(2, "compiled_timeout", worker=WORKER,
                              env={"SYMMFLOW_TIMEOUT_S": "5"}, timeout=180)
    assert len(results) == 2, out[-6000:]
    assert all(r["ok"] for r in results), json.dumps(results, indent=1)[-6000:]


def test_eager_barrier_runs_on_every_rank():
    _results(2, "barrier")


def test_float8_conversions_are_left_to_pytorch_node_by_node(world):
    def f(x):
        y = (x * 2.0).to(torch.float8_e4m3fn)
        return y.to(torch.float32) + 1.0

    x = torch.randn(4, 8)
    with torch.no_grad():
        got = torch.compile(f, backend="symmflow")(x)
    assert torch.equal(got, f(x))
    report = sft.last_report()
    assert report.kinds == ["symmflow", "torch", "symmflow"], report.kinds
    assert any("aten._to_copy.default at node" in b and "float8_e4m3fn is not one of symmflow's "
               "dtypes" in b for b in report.boundaries), report.boundaries


def test_the_timeout_default_is_the_cpp_tables(world):
    # symmflow.torch joined its world (the float8 compile above, or here) without a timeout of
    # its own: every wait is bounded by the C++ table's value (it was 60 s under symmflow.torch).
    rank = sft.init()
    assert symmflow.tunables()["timeout_s"]["default"] == "30"
    assert rank.timeout_s == float(symmflow.tunables()["timeout_s"]["value"])


@pytest.mark.parametrize("shape,message", [
    ((2**40, 2**40), "empty_symmetric: [1099511627776, 1099511627776] of f32 is more than 2^62 "
                     "bytes (its size overflows)"),
    ((2**62 + 1,), "empty_symmetric: [4611686018427387905] of f32 is more than 2^62 bytes (its "
                   "size overflows)"),
    ((3, -2), "empty_symmetric: negative dimension in [3, -2]"),
])
def test_sizes_are_checked_at_the_python_and_torch_entries(world, shape, message):
    """Issue 39 item 5 (Note [checked sizes]): `symmflow.torch.empty((2**40, 2**40))` aborted the
    process (`Storage size calculation overflowed`) and `symmflow.empty_symmetric` of 2^62 + 1
    floats returned an array over a 4-byte heap; both raise InvalidUsage naming the shape, and
    the world goes on (a right all-reduce after them)."""
    rank = sft.init()
    with pytest.raises(symmflow.InvalidUsage) as info:
        sft.empty(shape, dtype=torch.float32)
    assert str(info.value) == message
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.empty_symmetric(rank, list(shape), dtype="f32")
    assert str(info.value) == message
    x = torch.from_dlpack(symmflow.empty_symmetric(rank, [5], dtype="f32"))
    x.fill_(2.0)
    (y,) = symmflow.call_op(rank, "symm_mem::one_shot_all_reduce", x, "sum", "world")
    assert torch.equal(torch.from_dlpack(y), torch.full((5,), 2.0))

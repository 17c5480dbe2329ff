"""Fixtures for the symmflow.torch graph import tests: the catalogue of
the built `symmflow` command, a one-process gloo world (FileStore in a temp dir) for graphs with
c10d collectives, and helpers that compile IR text with the command."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# The package under test is put on sys.path by tests/python/conftest.py (the build tree's).

from symmflow.torch import _opmap  # noqa: E402


@pytest.fixture(scope="session")
def cli() -> str:
    path = _opmap.find_cli()
    if path is None:
        pytest.fail("no `symmflow` command: build it (cmake --build build/dev --target "
                    "symmflow_cli) or set SYMMFLOW_CLI")
    return path


@pytest.fixture(scope="session")
def catalogue(cli: str) -> _opmap.Catalogue:
    return _opmap.load_catalogue()


@pytest.fixture(scope="session")
def world():
    """A one-process gloo world; yields the WORLD group's c10d name. The world it made, and the
    directory of its store, are gone after the session."""
    import torch.distributed as dist

    tmp = None
    if not dist.is_initialized():
        tmp = tempfile.mkdtemp(prefix="symmflow_fx_")
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield dist.group.WORLD.group_name
    if tmp is not None:
        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(tmp, ignore_errors=True)


def run_cli(cli: str, command: str, text: str, ranks: int) -> subprocess.CompletedProcess:
    with tempfile.NamedTemporaryFile("w", suffix=".sf", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        return subprocess.run([cli, command, path, "--ranks", str(ranks)], capture_output=True,
                              text=True, timeout=120)
    finally:
        os.unlink(path)


def compile_ok(cli: str, text: str, ranks: int, command: str = "compile") -> str:
    """Compiles (or explains) IR text with the command; fails the test with its diagnostics."""
    r = run_cli(cli, command, text, ranks)
    assert r.returncode == 0, f"symmflow {command} failed:\n{r.stderr}\n--- text ---\n{text}"
    return r.stdout


_IDENT = re.compile(r'"[^"]*"|[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_.]*)?|\S')


def structure(text: str) -> list[str]:
    """IR text with comments dropped and every value and group renamed in order of definition,
    so two programs compare equal when they differ only in names."""
    lines = [l.split("#", 1)[0].strip() for l in text.splitlines()]
    lines = [l for l in lines if l]
    names: dict[str, str] = {}
    groups: dict[str, str] = {}
    for l in lines:
        m = re.match(r"group ([A-Za-z_][A-Za-z0-9_]*)", l)
        if m:
            groups[m.group(1)] = f"G{len(groups)}"
    for l in lines:
        if l.startswith("graph "):
            for m in re.finditer(r"([A-Za-z_][A-Za-z0-9_]*):", l[l.index("("):]):
                names.setdefault(m.group(1), f"v{len(names)}")
        m = re.match(r"([A-Za-z_][A-Za-z0-9_, ]*?) = ", l)
        if m and not l.startswith("group"):
            for n in m.group(1).split(","):
                names.setdefault(n.strip(), f"v{len(names)}")
    out = []
    for l in lines:
        if l.startswith("graph "):
            l = "graph NAME" + l[l.index("("):]
        toks = []
        for t in _IDENT.findall(l):
            if t.startswith('"') and t[1:-1] in groups:
                t = f'"{groups[t[1:-1]]}"'
            elif t in names:
                t = names[t]
            elif t in groups:
                t = groups[t]
            toks.append(t)
        out.append(" ".join(toks))
    return out


@pytest.fixture(scope="module")
def symmflow_ops():
    """torch.ops.symmflow ops as symmflow.torch will register them (defined here when absent)."""
    lib = torch.library.Library("symmflow", "FRAGMENT")
    if not hasattr(torch.ops.symmflow, "scaled_dot_product_attention"):
        lib.define("scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
                   "Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, "
                   "float? scale=None, bool enable_gqa=False) -> Tensor")

        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False):
            return F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal,
                                                  scale=scale, enable_gqa=enable_gqa).contiguous()

        lib.impl("scaled_dot_product_attention", sdpa, "CompositeExplicitAutograd")
        torch.library.register_fake("symmflow::scaled_dot_product_attention",
                                    lambda q, *a, **k: q.new_empty(q.shape), lib=lib)
    if not hasattr(torch.ops.symmflow, "two_shot_all_reduce_"):
        lib.define("two_shot_all_reduce_(Tensor(a!) input, str reduce_op, str group_name) -> ()")
        lib.impl("two_shot_all_reduce_", lambda x, op, g: None, "CompositeExplicitAutograd")
        torch.library.register_fake("symmflow::two_shot_all_reduce_", lambda x, op, g: None,
                                    lib=lib)
    if not hasattr(torch.ops.symmflow, "fused_all_reduce_add_rms_norm"):
        lib.define("fused_all_reduce_add_rms_norm(Tensor input, Tensor residual, Tensor weight, "
                   "float eps, str reduce_op, str group_name) -> (Tensor, Tensor)")

        def fused(x, residual, weight, eps, reduce_op, group_name):  # world of 1: no reduce
            s = x + residual
            return F.rms_norm(s, [s.shape[-1]], weight, eps), s

        lib.impl("fused_all_reduce_add_rms_norm", fused, "CompositeExplicitAutograd")
        torch.library.register_fake("symmflow::fused_all_reduce_add_rms_norm",
                                    lambda x, r, *a: (torch.empty_like(x), torch.empty_like(x)),
                                    lib=lib)
    yield torch.ops.symmflow

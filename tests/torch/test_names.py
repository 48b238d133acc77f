"""Op naming, directions and iteration structure of jlprof.torch, in-process (no nsys needed).

The annotator's NVTX calls are the nvtx package's real ones (inert without a profiler); the
tests record which registered message each push used, so they see exactly the texts nsys
would store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("nvtx")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import jlprof.torch as jt  # noqa: E402
from jlprof.engine.correlate.ops import parse_annotation  # noqa: E402
from jlprof.torch import annotator  # noqa: E402
from jlprof.torch.autoenable import pytorch_env  # noqa: E402


@pytest.fixture
def pushes(monkeypatch):
    """Texts of the ranges pushed (in order) and marks made while annotation is on."""
    seen: list[str] = []
    marks: list[dict] = []
    by_id: dict[int, str] = {}
    real_push, real_attrs = annotator._lib_push, annotator._Nvtx.attrs

    def attrs(self, text):
        a = real_attrs(self, text)
        by_id[id(a)] = text
        return a

    def push(a, handle):
        seen.append(by_id[id(a)])
        real_push(a, handle)

    def mark(self, text):
        marks.append(json.loads(text.removeprefix("jlprof:")))

    monkeypatch.setattr(annotator._Nvtx, "attrs", attrs)
    monkeypatch.setattr(annotator._Nvtx, "mark", mark)
    monkeypatch.setattr(annotator, "_lib_push", push)
    jt.init()
    yield seen, marks
    jt.shutdown()


def _ops(texts: list[str]) -> list[tuple[str, str]]:
    """(op name, direction) of the op ranges, in order."""
    out = []
    for t in texts:
        a = parse_annotation(t)
        if a is not None:
            out.append((a["op_name"], a["direction"]))
    return out


class B(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 2, 3))

    def forward(self, x):
        return F.conv1d(F.conv1d(x, self.w, padding=1), self.w, padding=1)


class A(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b = B()

    def forward(self, x):
        return self.b(self.b(x))


def test_guide_11_1_names(pushes):
    seen, _ = pushes
    A()(torch.randn(1, 2, 5))
    convs = [n for n, d in _ops(seen) if n.endswith("convolution") or "convolution(" in n]
    assert convs == ["/A/b/convolution", "/A/b/convolution(2)",
                     "/A/b(2)/convolution", "/A/b(2)/convolution(2)"]  # fmt: skip


def test_backward_ops_take_their_forward_names(pushes):
    seen, _ = pushes
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    net(torch.randn(2, 4)).sum().backward()
    ops = _ops(seen)
    fwd = {n for n, d in ops if d == "fprop"}
    bwd = {n for n, d in ops if d == "bprop"}
    assert {"/Sequential/0/addmm", "/Sequential/1/relu"} <= fwd & bwd
    assert {"/Sequential/0/weight.grad", "/Sequential/0/bias.grad"} <= bwd
    texts = [t for t in seen if t.startswith("/Sequential/0/addmm [") and "|bprop|" in t]
    assert texts and all(parse_annotation(t)["op_type"] == "aten::addmm" for t in texts)
    assert {parse_annotation(t)["bwd_op"] for t in texts} >= {"aten::mm"}
    first_b = next(i for i, (_, d) in enumerate(ops) if d == "bprop")
    assert all(d == "fprop" for _, d in ops[:first_b])  # forward first, then backward


def test_iteration_structure_and_name_restarts(pushes):
    seen, marks = pushes
    net = nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(6, 3)), batch_size=2)
    for (x,) in loader:
        F.mse_loss(net(x), torch.zeros(2, 2)).backward()
        opt.step()
    assert seen.count("optimizer_step") == 3
    assert seen.count("dataloader") == 4  # the 4th fetch raises StopIteration
    names = [n for n, _ in _ops(seen)]
    assert "/Linear/addmm" in names and "/Linear(2)/addmm" not in names
    assert any(n.startswith("/optimizer_step/") for n in names)
    assert any(n.startswith("/dataloader/") for n in names)
    steps = [m for m in marks if m["event"] == "step"]
    states = [m for m in marks if m["event"] == "state"]
    assert len(steps) == 1 and len(states) == 1  # marked when they change only
    assert states[0]["batch_size"] == 2 and states[0]["amp"] is False


def test_inference_loops_and_two_models(pushes):
    seen, _ = pushes
    g, d = nn.Linear(2, 2), nn.Linear(2, 1)
    g.__class__ = type("G", (nn.Linear,), {})
    d.__class__ = type("D", (nn.Linear,), {})
    with torch.no_grad():
        for _ in range(3):
            d(g(torch.randn(1, 2)))
            d(torch.randn(1, 2))
    names = {n.split("/")[1] for n, _ in _ops(seen) if n.count("/") >= 2}
    assert names == {"G", "D", "D(2)"}  # restart when the first model is called again


def test_an_exception_in_forward_leaves_the_scopes_clean(pushes):
    seen, _ = pushes

    class Bad(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    outer = nn.Sequential(nn.Linear(2, 2), Bad())
    with pytest.raises(ValueError):
        outer(torch.randn(1, 2))
    assert len(jt._annotator.stack) == 1
    nn.Linear(2, 2)(torch.randn(1, 2))
    assert _ops(seen)[-1][0] == "/Linear/addmm"


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_slow_apis_are_marked_but_not_torchs_own_use(pushes):
    _, marks = pushes
    net = nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net(torch.randn(1, 2)).sum().backward()
    opt.step()  # uses record_function internally: not the user's
    assert not [m for m in marks if m["event"] == "slow_api"]
    with torch.autograd.profiler.record_function("mine"):
        pass
    with torch.autograd.detect_anomaly():
        pass
    apis = [m["api"] for m in marks if m["event"] == "slow_api"]
    assert apis == ["record_function", "detect_anomaly"]


def _child(code: str, env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_auto_enable_turns_on_at_import_torch_only(tmp_path):
    env = pytorch_env()
    assert _child("import sys; print('jlprof.torch' in sys.modules)", env) == "False"
    assert _child("import torch, jlprof.torch as j; print(j.enabled())", env) == "True"
    assert _child("import torch, jlprof.torch as j; print(j.enabled())", {}) == "False"


def test_auto_enable_runs_the_sitecustomize_it_shadows(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_RAN'] = '1'\n")
    env = pytorch_env({"PYTHONPATH": str(tmp_path)})
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [
        str(Path(annotator.__file__).parent / "_site"),
        str(tmp_path),
    ]
    assert _child("import os; print(os.environ.get('SHADOWED_RAN'))", env) == "1"


@pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")
def test_torch_compile_still_compiles_under_annotation(pushes):
    """The mode ignores compile internals: one graph, as without jlprof, and no graph breaks
    from our hooks; eager ops around the compiled call stay annotated."""
    import torch._dynamo

    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    seen, _ = pushes
    net = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    compiled = torch.compile(net, backend="eager")
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), net(x))
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]
    assert "/Sequential/0/addmm" in [n for n, _ in _ops(seen)]  # the eager call


def test_missing_torch_is_a_clear_error(tmp_path):
    """Without torch, init() says what to install; the error is an ImportError too."""
    (tmp_path / "torch.py").write_text("raise ImportError('No module named torch')\n")
    code = (
        "import jlprof.errors, jlprof.torch as j\n"
        "try:\n    j.init()\nexcept ImportError as e:\n"
        "    print(type(e).__name__, isinstance(e, jlprof.errors.JlprofError), e)\n"
    )
    out = _child(code, {"PYTHONPATH": str(tmp_path)})
    assert out.startswith("TorchUnavailable True jlprof.torch.init() needs PyTorch")

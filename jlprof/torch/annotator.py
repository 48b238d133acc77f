"""NVTX ranges for every PyTorch op, named by the module call hierarchy (guide §11).

How it sees the ops without ``emit_nvtx`` (which needs a CUDA build):

* a :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees every aten op below autograd,
  forward and backward, on the thread that runs it (so GPU launches nest inside its range);
* global module forward pre/post hooks keep the scope stack (``/Net/layer1(2)``) that names ops;
* forward ops record their autograd sequence number (``_get_sequence_nr() - 1`` while the op is
  dispatched: autograd creates the node before redispatching); in the backward pass
  ``torch._C._current_autograd_node()._sequence_nr()`` finds the forward op, so a backward op
  carries its forward op's name with direction ``bprop``;
* global optimizer step hooks give the ``optimizer_step`` range (the default key node) and a
  patched DataLoader iterator the ``dataloader`` range.

Hot path cost: one dict lookup for the op's name counter, one tuple of shapes, one cache lookup
for the pre-registered NVTX message; the text itself is built once per unique (name, shapes).
``ignore_compile_internals`` keeps torch.compile compiling (compiled regions are not annotated).
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from jlprof.torch import format as fmt

try:  # the nvtx package: pre-registered strings make a push ~1 µs
    from nvtx._lib import Domain, EventAttributes, RegisteredString
    from nvtx._lib import mark as _lib_mark
    from nvtx._lib import pop_range as _lib_pop
    from nvtx._lib import push_range as _lib_push
except ImportError:  # pragma: no cover - exercised only without the nvtx package
    Domain = None  # type: ignore[assignment,misc]

_get_seq = torch._C._autograd._get_sequence_nr
_cur_node = torch._C._current_autograd_node
_dynamo_tracing = torch.compiler.is_dynamo_compiling  # a constant False outside tracing
try:  # torch.compile(module)'s wrapper: global hooks fire for it too; it is no scope of its own
    from torch._dynamo.eval_frame import OptimizedModule as _OptMod
except ImportError:  # pragma: no cover - torch without dynamo

    class _OptMod:  # type: ignore[no-redef]
        pass


_Tensor = torch.Tensor
ROOT_NAME_CAP = 1024  # top-level names restart after this many uses (bounded name set)
MAX_FWD_LINKS = 1 << 18  # forward-op links kept for the backward pass (oldest dropped first)
MAX_TEXTS = 1 << 17  # cached op texts (varying shapes make more); past it the caches restart
# frames of these packages are not the user's (stack traces, slow-API callers)
_NOT_USER = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, fmt) if m.__file__
)
_SKIP_FRAMES = ("<frozen", f"{os.sep}nvtx{os.sep}")


class _Nvtx:
    """Push/pop/mark with messages registered once (nsys stores them as StringIds)."""

    def __init__(self) -> None:
        if Domain is None:
            from jlprof.errors import TorchUnavailable

            raise TorchUnavailable(
                "jlprof.torch needs the nvtx package: pip install 'jlprof[torch]' (nvtx>=0.2.10)"
            )
        self.domain = Domain(None)
        self.handle = self.domain.handle
        self._attrs: dict[str, Any] = {}

    def attrs(self, text: str) -> Any:
        a = self._attrs.get(text)
        if a is None:
            a = self._attrs[text] = EventAttributes(
                RegisteredString(self.handle, text), "blue", None, None
            )
        return a

    def clear(self) -> None:
        self._attrs.clear()

    def push(self, attrs: Any) -> None:
        _lib_push(attrs, self.handle)

    def pop(self) -> None:
        _lib_pop(self.handle)

    def mark(self, text: str) -> None:
        _lib_mark(EventAttributes(RegisteredString(self.handle, text), "blue", None, None),
                  self.handle)  # fmt: skip


class _Scope:
    """One level of the call hierarchy: its path and how often each child name was used."""

    __slots__ = ("counts", "module", "path")

    def __init__(self, path: str, module: Any = None) -> None:
        self.path = path
        self.module = module
        self.counts: dict[str, int] = {}

    def child(self, name: str) -> str:
        """``path/name``, or ``path/name(k)`` for the k-th use of ``name`` here (guide §11.1)."""
        k = self.counts.get(name, 0) + 1
        self.counts[name] = k
        return self.name(name, k)

    def name(self, name: str, k: int) -> str:
        return f"{self.path}/{name}" if k == 1 else f"{self.path}/{name}({k})"


def _dtype_name(dt: Any, cache: dict[Any, str] = {}) -> str:  # noqa: B006 - a cache
    s = cache.get(dt)
    if s is None:
        s = cache[dt] = str(dt).removeprefix("torch.")
    return s


def _user_stack(limit: int = 4) -> str:
    """The innermost user frames (not torch's, not ours): ``train.py:42 step;train.py:80 main``."""
    out = []
    for fr in reversed(traceback.extract_stack()):
        fn = fr.filename
        if fn.startswith(_NOT_USER) or any(s in fn for s in _SKIP_FRAMES):
            continue
        out.append(f"{os.path.basename(fn)}:{fr.lineno} {fr.name}")
        if len(out) == limit:
            break
    return ";".join(out)


class Annotator(TorchDispatchMode):
    """The dispatch mode plus hooks; one per process (see :func:`jlprof.torch.init`)."""

    def __init__(self, *, stack_trace: bool = False) -> None:
        super().__init__()
        self.nvtx = _Nvtx()
        self.handle = self.nvtx.handle
        self._first_root: int | None = None  # first model called since the last step/fetch
        self.stack_trace = stack_trace
        self.root = _Scope("")
        self.stack: list[_Scope] = [self.root]
        self.thread = threading.get_ident()
        # id(OpOverload) -> ("aten::x", "x", is a profiler op, the op's C++ callable)
        self._func: dict[int, tuple[str, str, bool, Any]] = {}
        # forward: (scope path, op, call index, shapes, dtype) -> (attrs, link info);
        # backward: (id(link info), op) -> (attrs, link info)
        self._text: dict[tuple, tuple[Any, Any]] = {}
        self._fwd: dict[int, tuple[str, str, str, str]] = {}  # seq -> name, type, dtype, shapes
        self._last_seq = -1
        self._child_names: dict[tuple[int, int], str] = {}
        self._handles: list[Any] = []
        self._state: tuple | None = None
        self._device = "cuda" if torch.cuda.is_available() else "cpu"
        self._steps = 0
        self._last_step: tuple | None = None
        self._slow_seen: set[str] = set()
        # models called at the top level, for parameter names
        self._roots: Any = weakref.WeakValueDictionary()
        self._patched: list[tuple[Any, str, Any]] = []
        self.active = False

    # ---- the dispatch mode ------------------------------------------------------------------
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """torch.compile still compiles while we annotate (the default would fall back to eager
        for every compiled function, profiling code the user does not run); compiled regions
        run as they would, unannotated, inside the ranges around them."""
        return True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No ``torch._disable_dynamo`` wrapper around our hot path (it costs ~2 µs per op); it
        is not needed: with ``ignore_compile_internals`` the mode is off while Dynamo compiles,
        and compiled code does not call it."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        fid = id(func)
        f = self._func.get(fid)
        if f is None:
            f = self._func[fid] = self._describe(func)
        if f[2]:  # record_function's own enter/exit: not model ops
            return func(*args, **(kwargs or {}))
        shapes = []
        dtype = None
        for a in args:
            if isinstance(a, _Tensor):
                shapes.append(a.shape)
                if dtype is None:
                    dtype = a.dtype
            elif a.__class__ is list and a and isinstance(a[0], _Tensor):
                for t in a:
                    if isinstance(t, _Tensor):
                        shapes.append(t.shape)
                        if dtype is None:
                            dtype = t.dtype
        node = _cur_node()
        if node is None:  # forward (or no-grad) op, named by the scope it runs in
            scope = self.stack[-1]
            counts = scope.counts
            k = counts.get(f[1], 0) + 1
            counts[f[1]] = k
            key = (scope.path, fid, k, tuple(shapes), dtype)
            entry = self._text.get(key)
            if entry is None:
                entry = self._text[key] = self._register_fwd(scope, f, k, shapes, dtype)
            seq = _get_seq()
            if seq != self._last_seq:  # first op since autograd made node seq-1: it is ours
                self._last_seq = seq
                self._link(seq - 1, entry[1])
            attrs = entry[0]
        else:  # backward: the forward op that made this autograd node names it
            info = self._fwd.get(node._sequence_nr())
            if info is not None:
                key = (id(info), fid)  # the entry keeps ``info`` alive: its id cannot recur
                entry = self._text.get(key)
                if entry is None:
                    name, fop, dt, st = info
                    text = fmt.op_text(name, fop, "bprop", dt, st, bwd=f[0])
                    entry = self._text[key] = (self.nvtx.attrs(text), info)
                attrs = entry[0]
            else:
                attrs = self._unlinked(node, fid, f[0], shapes, dtype)
        handle = self.handle
        _lib_push(attrs, handle)
        try:
            return f[3](*args, **(kwargs or {}))  # OpOverload._op: skips a Python frame
        finally:
            _lib_pop(handle)

    @staticmethod
    def _describe(func: Any) -> tuple[str, str, bool, Any]:
        q = func._schema.name
        return q, q.rsplit("::", 1)[-1], q.startswith("profiler::"), getattr(func, "_op", func)

    def _link(self, seq: int, info: tuple) -> None:
        fwd = self._fwd
        fwd[seq] = info
        if len(fwd) > MAX_FWD_LINKS:
            for k in list(fwd)[: MAX_FWD_LINKS // 2]:
                del fwd[k]

    def new_iteration(self) -> None:
        """Top-level names start again (``/Net``, not ``/Net(57)``): a step ended, a fetch began,
        or the first model of the iteration is called again (inference loops)."""
        self.root.counts.clear()
        self._first_root = None

    def _register_fwd(self, scope: _Scope, f: tuple, k: int, shp: list, dtype: Any) -> tuple:
        if len(self._text) > MAX_TEXTS:  # e.g. a new sequence length every batch
            self._text.clear()
            self.nvtx.clear()
        name, op = scope.name(f[1], k), f[0]
        if scope is self.root and k >= ROOT_NAME_CAP:  # top-level loop with no step/fetch: wrap
            scope.counts.clear()
        dt = _dtype_name(dtype) if dtype is not None else ""
        st = fmt.shapes_text(shp)
        stack = _user_stack() if self.stack_trace else ""
        text = fmt.op_text(name, op, "fprop", dt, st, stack=stack)
        return self.nvtx.attrs(text), (name, op, dt, st)

    def _unlinked(self, node: Any, fid: int, op: str, shp: list, dtype: Any) -> Any:
        """A backward node with no forward op: AccumulateGrad (named by its parameter) or a
        node made before init() (named by its class)."""
        kind = type(node).__name__
        var = getattr(node, "variable", None) if kind == "AccumulateGrad" else None
        key = (kind, id(var), fid, tuple(shp), dtype)
        entry = self._text.get(key)
        if entry is not None and (var is None or entry[1]() is var):  # ids of freed params recur
            return entry[0]
        pname = self._param_name(var) if var is not None else None
        dt = _dtype_name(dtype) if dtype is not None else ""
        name = f"{pname}.grad" if pname else f"/{kind}"
        text = fmt.op_text(name, kind, "bprop", dt, fmt.shapes_text(shp), bwd=op)
        attrs = self.nvtx.attrs(text)
        if pname is not None or var is None:  # an unnamed parameter may get a name later
            self._text[key] = (attrs, None if var is None else weakref.ref(var))
        return attrs

    def _param_name(self, var: Any) -> str | None:
        """``/Net/conv1/weight`` for a parameter of a model called since init()."""
        for root in list(self._roots.values()):
            for n, p in root.named_parameters():
                if p is var:
                    return f"/{type(root).__name__}/" + n.replace(".", "/")
        return None

    # ---- module hooks -------------------------------------------------------------------------
    def _module_pre(self, mod: Any, args: Any) -> None:
        if _dynamo_tracing() or threading.get_ident() != self.thread or mod.__class__ is _OptMod:
            return
        parent = self.stack[-1]
        pm = parent.module
        name = None
        if pm is not None:
            key = (id(pm), id(mod))
            name = self._child_names.get(key)
            if name is None or pm._modules.get(name) is not mod:  # ids of dead modules recur
                for n, c in pm.named_children():
                    if c is mod or getattr(c, "_orig_mod", None) is mod:
                        name = n
                        break
                else:
                    name = type(mod).__name__
                self._child_names[key] = name
        elif parent is not self.root:  # a module run by the optimizer or a DataLoader fetch
            name = type(mod).__name__
        else:
            name = type(mod).__name__
            if self._first_root is None:
                self._first_root = id(mod)
            elif self._first_root == id(mod):
                self.new_iteration()
                self._first_root = id(mod)
            if id(mod) not in self._roots:
                self._roots[id(mod)] = mod
            self._on_root_call(mod, args)
        self.stack.append(_Scope(parent.child(name), mod))

    def _module_post(self, mod: Any, args: Any, out: Any) -> None:
        if _dynamo_tracing() or threading.get_ident() != self.thread or mod.__class__ is _OptMod:
            return
        if len(self.stack) > 1 and self.stack[-1].module is mod:
            self.stack.pop()

    def _on_root_call(self, mod: Any, args: Any) -> None:
        """Once per model call: record what the profile cannot show when it changes."""
        batch = None
        for a in args if isinstance(args, tuple) else (args,):
            if isinstance(a, _Tensor) and a.dim() > 0:
                batch = int(a.shape[0])
                break
        dev = self._device
        key = (
            batch,
            torch.is_autocast_enabled(dev),
            torch.backends.cudnn.benchmark,
            torch.backends.cudnn.deterministic,
            torch.is_anomaly_enabled(),
            torch.is_grad_enabled(),
        )
        if key != self._state:  # the full payload only when something changed
            self._state = key
            state = self.state_payload(batch)
            self.nvtx.mark(fmt.mark_text({"event": "state", **state}))

    @staticmethod
    def state_payload(batch: int | None) -> dict[str, Any]:
        cuda = torch.cuda.is_available()
        amp = torch.is_autocast_enabled("cuda") if cuda else torch.is_autocast_enabled("cpu")
        amp_dtype = ""
        if amp:
            amp_dtype = _dtype_name(torch.get_autocast_dtype("cuda" if cuda else "cpu"))
        return {
            "amp": bool(amp),
            "amp_dtype": amp_dtype,
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "detect_anomaly": bool(torch.is_anomaly_enabled()),
            "grad_enabled": bool(torch.is_grad_enabled()),
            "batch_size": batch,
            "cuda": bool(cuda),
            "torch": torch.__version__,
        }

    # ---- iteration structure ----------------------------------------------------------------
    def _step_pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        if _dynamo_tracing():
            return
        self.nvtx.push(self.nvtx.attrs("optimizer_step"))
        self.stack.append(_Scope("/optimizer_step", None))

    def _step_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        if _dynamo_tracing():
            return
        if len(self.stack) > 1 and self.stack[-1].path == "/optimizer_step":
            self.stack.pop()
        self.nvtx.pop()
        self.new_iteration()
        self._step_mark()

    def _step_mark(self) -> None:
        """Peak memory and compiled graphs after a step; marked only when they change."""
        self._steps += 1
        payload: dict[str, Any] = {"event": "step"}
        if self._device == "cuda":
            dev = torch.cuda.current_device()
            payload["peak_mem_bytes"] = int(torch.cuda.max_memory_allocated(dev))
            payload["total_mem_bytes"] = int(torch.cuda.get_device_properties(dev).total_memory)
        dyn = sys.modules.get("torch._dynamo.utils")
        if dyn is not None:
            stats = dyn.counters.get("stats", {})
            payload["compiled_graphs"] = int(stats.get("unique_graphs", 0))
        key = tuple(payload.values())
        if key != self._last_step:
            self._last_step = key
            payload["step"] = self._steps
            self.nvtx.mark(fmt.mark_text(payload))

    def dataloader_range(self, fetch: Any) -> Any:
        ann = self

        def __next__(it: Any) -> Any:
            if threading.get_ident() != ann.thread or not ann.active:
                return fetch(it)
            ann.new_iteration()
            ann.nvtx.push(ann.nvtx.attrs("dataloader"))
            ann.stack.append(_Scope("/dataloader", None))
            try:
                return fetch(it)
            finally:
                if ann.stack[-1].path == "/dataloader":
                    ann.stack.pop()
                ann.nvtx.pop()

        return __next__

    def slow_api(self, name: str, fn: Any) -> Any:
        """Wrap a slow debugging API so its first use leaves a mark (Slow API detector)."""
        ann = self

        def wrapper(*a: Any, **k: Any) -> Any:
            caller = sys._getframe(1).f_code.co_filename
            if ann.active and name not in ann._slow_seen and not caller.startswith(_NOT_USER):
                ann._slow_seen.add(name)
                ann.nvtx.mark(fmt.mark_text({"event": "slow_api", "api": name}))
            return fn(*a, **k)

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    # ---- enable / disable -------------------------------------------------------------------
    def _patch(self, owner: Any, attr: str, new: Any) -> None:
        self._patched.append((owner, attr, owner.__dict__[attr]))
        setattr(owner, attr, new)

    def enable(self) -> None:
        from torch.nn.modules import module as nnmod
        from torch.optim import optimizer as optmod
        from torch.utils.data import dataloader as dl

        self.thread = threading.get_ident()
        self._handles = [
            nnmod.register_module_forward_pre_hook(self._module_pre),
            nnmod.register_module_forward_hook(self._module_post, always_call=True),
            optmod.register_optimizer_step_pre_hook(self._step_pre),
            optmod.register_optimizer_step_post_hook(self._step_post),
        ]
        base = dl._BaseDataLoaderIter
        self._patch(base, "__next__", self.dataloader_range(base.__next__))
        ag = torch.autograd
        self._patch(ag, "gradcheck", self.slow_api("gradcheck", ag.gradcheck))
        self._patch(ag, "gradgradcheck", self.slow_api("gradgradcheck", ag.gradgradcheck))
        prof = torch.autograd.profiler
        for cls, api in (
            (prof.record_function, "record_function"),
            (prof.profile, "autograd_profiler"),
        ):
            self._patch(cls, "__enter__", self.slow_api(api, cls.__enter__))
        self._patch(
            torch.autograd.anomaly_mode.detect_anomaly,
            "__enter__",
            self.slow_api("detect_anomaly", torch.autograd.anomaly_mode.detect_anomaly.__enter__),
        )
        self._patch(
            torch.autograd.anomaly_mode.set_detect_anomaly,
            "__init__",
            self.slow_api(
                "set_detect_anomaly", torch.autograd.anomaly_mode.set_detect_anomaly.__init__
            ),
        )
        self.active = True
        self.__enter__()
        self.nvtx.mark(fmt.mark_text({"event": "init", **self.state_payload(None)}))

    def disable(self) -> None:
        if not self.active:
            return
        self.active = False
        self.__exit__(None, None, None)
        for h in self._handles:
            h.remove()
        self._handles = []
        for owner, attr, old in reversed(self._patched):
            setattr(owner, attr, old)
        self._patched = []
        del self.stack[1:]

"""jlprof's own NVTX client: push and pop ranges through nsys's injection library, with ctypes.

The capture range must not depend on the user's ``nvtx`` package: with Debian's nsys 2022.4,
``nvtx`` 0.2.17 (what ``pip install 'jlprof[notebook]'`` brings) records nothing, so a capture
range opened through it never starts. NVTX v3 is header-only: each library that uses it keeps
its own table of function pointers and hands it to the tool's injection library
(``InitializeInjectionNvtx2``, found already loaded or at ``$NVTX_INJECTION64_PATH``, which nsys
sets), which fills in its implementations. This module is such a client, written against the
NVTX 3 headers nsys 2022.4 ships (``nvtx/include/nvtx3/nvtxDetail/nvtxImpl.h``, ``nvtxTypes.h``):
a tool that attaches to programs built with those headers attaches to this one too.

Only the CORE2 (domain) module is used: ``nvtxDomainCreateA``, ``nvtxDomainRegisterStringA``,
``nvtxDomainRangePushEx``, ``nvtxDomainRangePop``. Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import threading

# nvtxTypes.h: NvtxCallbackModule and the size of each module's callback id enum
_MODULE_SIZES = {1: 16, 2: 9, 3: 15, 4: 7, 5: 16, 6: 7}  # CORE, CUDA, OPENCL, CUDART, CORE2, SYNC
_CORE2 = 5
_CORE2_RANGE_PUSH_EX = 4
_CORE2_RANGE_POP = 5
_CORE2_REGISTER_STRING_A = 10
_CORE2_DOMAIN_CREATE_A = 12
_ETID_CALLBACKS = 1
_ETID_VERSIONINFO = 3
_NVTX_VERSION = 3
_MESSAGE_TYPE_REGISTERED = 3

_GetModuleFunctionTable = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint)
)
_SetInjectionNvtxVersion = ctypes.CFUNCTYPE(None, ctypes.c_uint32)
_GetExportTable = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)
_InitializeInjection = ctypes.CFUNCTYPE(ctypes.c_int, _GetExportTable)


class _Callbacks(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("get_module", _GetModuleFunctionTable)]


class _VersionInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("version", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("set_version", _SetInjectionNvtxVersion),
    ]


class _EventAttributes(ctypes.Structure):
    """``nvtxEventAttributes_t`` (v2, 48 bytes): only the message is set."""

    _fields_ = [
        ("version", ctypes.c_uint16),
        ("size", ctypes.c_uint16),
        ("category", ctypes.c_uint32),
        ("colorType", ctypes.c_int32),
        ("color", ctypes.c_uint32),
        ("payloadType", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("payload", ctypes.c_uint64),
        ("messageType", ctypes.c_int32),
        ("message", ctypes.c_void_p),
    ]


_DomainCreateA = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_RegisterStringA = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)
_RangePushEx = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_EventAttributes))
_RangePop = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class NvtxUnavailable(RuntimeError):
    """No NVTX tool (nsys's injection library) attached to jlprof's client."""


class _Client:
    """One NVTX client instance: its slot tables, filled by the injection library once."""

    def __init__(self) -> None:
        # per module: slots 1..n-1 hold the function pointers the injection library writes
        # (NULL: a no-op), and the table handed to it holds their addresses, 0 first and last,
        # as ``functionTable_<MODULE>[SIZE + 1]`` in nvtxImpl.h
        width = ctypes.sizeof(ctypes.c_void_p)
        self.slots = {m: (ctypes.c_void_p * (n + 1))() for m, n in _MODULE_SIZES.items()}
        self.tables = {}
        for module, n in _MODULE_SIZES.items():
            base = ctypes.addressof(self.slots[module])
            self.tables[module] = (ctypes.c_void_p * (n + 1))(
                0, *[base + i * width for i in range(1, n)]
            )
        self.get_module = _GetModuleFunctionTable(self._get_module)
        self.set_version = _SetInjectionNvtxVersion(lambda _v: None)
        self.callbacks = _Callbacks(ctypes.sizeof(_Callbacks), self.get_module)
        self.version = _VersionInfo(ctypes.sizeof(_VersionInfo), _NVTX_VERSION, 0, self.set_version)
        self.export = _GetExportTable(self._export)

    def _get_module(self, module: int, out_table, out_size) -> int:  # type: ignore[no-untyped-def]
        table = self.tables.get(module)
        if table is None:
            return 0
        if out_size:
            out_size[0] = len(table) - 1
        if out_table:
            out_table[0] = ctypes.addressof(table)
        return 1

    def _export(self, table_id: int) -> int | None:
        if table_id == _ETID_CALLBACKS:
            return ctypes.addressof(self.callbacks)
        if table_id == _ETID_VERSIONINFO:
            return ctypes.addressof(self.version)
        return None

    def attach(self) -> None:
        """Hand this client to the injection library (the tool fills the slots)."""
        init = _find_injection()
        if init is None:
            raise NvtxUnavailable(
                "no NVTX tool is attached to this process (not started under nsys, or "
                "NVTX_INJECTION64_PATH unset)"
            )
        if init(self.export) == 0:
            raise NvtxUnavailable("nsys's NVTX injection library refused to initialise")

    def fn(self, module: int, cbid: int, kind):  # type: ignore[no-untyped-def]
        address = self.slots[module][cbid]
        return kind(address) if address else None


def _find_injection():  # type: ignore[no-untyped-def]
    """``InitializeInjectionNvtx2``: pre-loaded in the process, else at $NVTX_INJECTION64_PATH."""
    for name in (None, os.environ.get("NVTX_INJECTION64_PATH")):
        if name == "":
            continue
        try:
            lib = ctypes.CDLL(name)
            address = ctypes.cast(lib.InitializeInjectionNvtx2, ctypes.c_void_p).value
        except (OSError, AttributeError, TypeError):
            continue
        if address:
            return _InitializeInjection(address)
    return None


class Domain:
    """An NVTX domain of jlprof's client, for push/pop ranges with registered names.

    Raises :class:`NvtxUnavailable` when no tool attached or the tool gave no range functions
    (then nothing would be recorded).
    """

    _client: _Client | None = None
    _lock = threading.Lock()

    def __init__(self, name: str) -> None:
        with Domain._lock:
            if Domain._client is None:
                client = _Client()
                client.attach()
                Domain._client = client
        client = Domain._client
        create = client.fn(_CORE2, _CORE2_DOMAIN_CREATE_A, _DomainCreateA)
        self._register = client.fn(_CORE2, _CORE2_REGISTER_STRING_A, _RegisterStringA)
        self._push = client.fn(_CORE2, _CORE2_RANGE_PUSH_EX, _RangePushEx)
        self._pop = client.fn(_CORE2, _CORE2_RANGE_POP, _RangePop)
        if create is None or self._register is None or self._push is None or self._pop is None:
            raise NvtxUnavailable("the NVTX tool attached but records no domain ranges")
        self.handle = create(name.encode())
        self._names: dict[str, _EventAttributes] = {}

    def _attributes(self, message: str) -> _EventAttributes:
        attrs = self._names.get(message)
        if attrs is None:
            registered = self._register(self.handle, message.encode())
            attrs = _EventAttributes(
                version=_NVTX_VERSION,
                size=ctypes.sizeof(_EventAttributes),
                messageType=_MESSAGE_TYPE_REGISTERED,
                message=registered,
            )
            self._names[message] = attrs
        return attrs

    def push(self, message: str) -> None:
        self._push(self.handle, ctypes.byref(self._attributes(message)))

    def pop(self) -> None:
        self._pop(self.handle)

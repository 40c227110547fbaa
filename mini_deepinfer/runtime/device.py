"""Where the model runs and in which dtype: ``--device cpu | cuda[:N] | npu[:N]``, ``--dtype``.

Scope: turning the two command-line strings into a ``torch.device`` and a ``torch.dtype`` with one-line
errors; the device module (``torch.cuda`` or ``torch.npu``) that gives events, streams and
``synchronize`` through one code path; and a description of the device for run records.

Non-scope: placing tensors or weights (the loader and the runner do that), multi-device runs, and
choosing dtypes per tensor (probabilities for verification are always float64 on the CPU, see
``sampling.py``).

``torch_npu`` is imported only when an npu device is requested, so a machine without it never pays for it
(and never needs it).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from types import ModuleType
from typing import Any

import torch

__all__ = [
    "DTYPES",
    "DTypeError",
    "DeviceError",
    "device_info",
    "device_module",
    "dtype_name",
    "resolve_device",
    "resolve_dtype",
    "synchronize",
]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
"""Accepted ``--dtype`` names; float32 is the reference."""

_DEVICE_PATTERN = re.compile(r"(cpu|cuda|npu)(?::(\d+))?")
_ACCELERATOR_NAMES = {"cuda": "CUDA", "npu": "NPU"}


class DeviceError(ValueError):
    """A device string that is malformed or names a device this machine does not have."""


class DTypeError(ValueError):
    """A dtype name outside :data:`DTYPES`."""


def resolve_dtype(name: str) -> torch.dtype:
    """Map ``float32 | bfloat16 | float16`` to the torch dtype.

    Raises:
        DTypeError: for any other name; the message lists the accepted ones.
    """
    try:
        return DTYPES[name]
    except KeyError:
        raise DTypeError(f"unknown dtype {name!r}: use {', '.join(DTYPES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    """The ``--dtype`` name of a torch dtype (``torch.bfloat16`` -> ``"bfloat16"``)."""
    return str(dtype).removeprefix("torch.")


def _import_torch_npu() -> None:
    """Import ``torch_npu`` (which registers ``torch.npu``), or explain why it cannot be used."""
    try:
        import torch_npu  # noqa: F401  (imported for its side effect: the npu backend)
    except ModuleNotFoundError as exc:
        if exc.name == "torch_npu":
            raise DeviceError("npu requested but torch_npu is not installed") from None
        raise DeviceError(f"npu requested but torch_npu failed to import: {exc}") from None
    except ImportError as exc:
        raise DeviceError(f"npu requested but torch_npu failed to import: {exc}") from None


def _check_accelerator(kind: str, index: int) -> None:
    """Raise if ``kind:index`` is not a device this process can use."""
    label = _ACCELERATOR_NAMES[kind]
    try:
        module = torch.get_device_module(kind)
    except RuntimeError:  # the backend never registered itself with torch
        raise DeviceError(
            f"{kind}:{index} requested but torch {torch.__version__} has no {kind} backend"
        ) from None
    if not module.is_available():
        raise DeviceError(
            f"{kind}:{index} requested but {label} is not available (torch {torch.__version__})"
        )
    count = module.device_count()
    if index >= count:
        raise DeviceError(
            f"{kind}:{index} requested but only {count} {label} device(s) are visible "
            f"({kind}:0 to {kind}:{count - 1})"
        )


def resolve_device(spec: str) -> torch.device:
    """Validate ``cpu | cuda[:N] | npu[:N]`` and return the device (``cuda`` means ``cuda:0``).

    Args:
        spec: the ``--device`` string.

    Returns:
        ``torch.device('cpu')`` or an accelerator with an explicit index.

    Raises:
        DeviceError: malformed string, missing ``torch_npu``, no such backend or index out of range.
    """
    match = _DEVICE_PATTERN.fullmatch(spec.strip().lower())
    if match is None or (match.group(1) == "cpu" and match.group(2) is not None):
        raise DeviceError(f"unknown device {spec!r}: use cpu, cuda[:N] or npu[:N]")
    kind, index_text = match.groups()
    if kind == "cpu":
        return torch.device("cpu")
    index = int(index_text or 0)
    if kind == "npu":
        _import_torch_npu()
    _check_accelerator(kind, index)
    return torch.device(kind, index)


def device_module(device: torch.device) -> ModuleType | None:
    """``torch.cuda`` or ``torch.npu`` (events, streams, synchronize) for an accelerator; None for cpu."""
    if device.type == "cpu":
        return None
    return torch.get_device_module(device)


def synchronize(device: torch.device) -> None:
    """Wait until all work queued on ``device`` has finished (a no-op on cpu, where work is synchronous)."""
    module = device_module(device)
    if module is not None:
        module.synchronize(device)


def _cpu_name() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (x86), else what ``platform`` reports."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


VECTOR_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16",
                "amx_int8")
"""The ``/proc/cpuinfo`` flags a record lists (the vector units that decide which kernels run fast)."""


def _cpu_vector_flags() -> list[str]:
    """Which of ``VECTOR_FLAGS`` the CPU reports, in that order; empty where ``/proc/cpuinfo`` has none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    present = set(value.split())
                    return [flag for flag in VECTOR_FLAGS if flag in present]
    except OSError:
        pass
    return []


def _nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver version from ``nvidia-smi``, or None when it cannot be asked."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        result = subprocess.run(
            [executable, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = result.stdout.strip().splitlines()
    return lines[0].strip() if lines else None


def _npu_versions() -> tuple[str | None, str | None]:
    """``(torch_npu version, CANN version)``; either is None when unknown."""
    try:
        import torch_npu
    except ImportError:
        return None, None
    cann = None
    get_cann_version = getattr(getattr(torch_npu, "utils", None), "get_cann_version", None)
    if get_cann_version is not None:
        try:
            cann = get_cann_version() or None  # "" before CANN 8.1.RC1
        except Exception:  # noqa: BLE001 - a version probe must never stop a run
            cann = None
    return getattr(torch_npu, "__version__", None), cann


def device_info(device: torch.device) -> dict[str, Any]:
    """Describe the device for a run record; every key is present, None where it does not apply.

    Keys: ``type``, ``index``, ``name`` (accelerator name, or the CPU model on cpu), ``cpu_name``,
    ``cpu_isa`` (the vector kernels torch runs on this CPU: ``AVX512``, ``AVX2``, ...), ``cpu_flags`` (the
    ``VECTOR_FLAGS`` the CPU reports), ``cpu_threads`` (torch intra-op threads), ``cpu_count``, ``torch``,
    ``cuda`` (CUDA runtime torch was built with), ``driver`` (NVIDIA driver), ``torch_npu``, ``cann``.
    """
    cpu_name = _cpu_name()
    info: dict[str, Any] = {
        "type": device.type,
        "index": device.index,
        "name": cpu_name,
        "cpu_name": cpu_name,
        "cpu_isa": torch.backends.cpu.get_cpu_capability(),
        "cpu_flags": _cpu_vector_flags(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": None,
        "driver": None,
        "torch_npu": None,
        "cann": None,
    }
    if device.type == "cuda":
        info.update(name=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                    driver=_nvidia_driver_version())
    elif device.type == "npu":
        torch_npu_version, cann = _npu_versions()
        module = device_module(device)
        info.update(name=module.get_device_name(device) if module else None,
                    torch_npu=torch_npu_version, cann=cann)
    return info

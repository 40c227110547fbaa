"""Device and dtype flags: accepted spellings, one-line errors, and the device description for records."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

from mini_deepinfer.runtime.device import (
    DTYPES,
    VECTOR_FLAGS,
    DeviceError,
    DTypeError,
    device_info,
    device_module,
    dtype_name,
    resolve_device,
    resolve_dtype,
    synchronize,
)

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@pytest.fixture(autouse=True)
def forget_fake_torch_npu():
    """A fake ``torch_npu`` imported by a test must not stay in ``sys.modules`` for later tests."""
    before = sys.modules.get("torch_npu", "absent")
    yield
    if before == "absent":
        sys.modules.pop("torch_npu", None)
    else:
        sys.modules["torch_npu"] = before


class FakeAccelerator(types.SimpleNamespace):
    """Stands in for ``torch.cuda`` / ``torch.npu`` with a chosen availability and device count."""

    def is_available(self) -> bool:
        return self.available

    def device_count(self) -> int:
        return self.count


def fake_device_modules(monkeypatch: pytest.MonkeyPatch, *, available: bool, count: int) -> None:
    module = FakeAccelerator(available=available, count=count)
    monkeypatch.setattr(torch, "get_device_module", lambda kind: module)


@pytest.mark.parametrize("spec", ["cpu", " CPU "])
def test_cpu_spellings_resolve_to_cpu(spec: str) -> None:
    assert resolve_device(spec) == torch.device("cpu")


@pytest.mark.parametrize("spec", ["tpu", "cuda:", "cuda:x", "cpu:0", "npu:-1", ""])
def test_unknown_device_names_the_accepted_forms(spec: str) -> None:
    with pytest.raises(DeviceError) as error:
        resolve_device(spec)
    assert str(error.value) == f"unknown device {spec!r}: use cpu, cuda[:N] or npu[:N]"


def test_unknown_device_message_is_one_line() -> None:
    with pytest.raises(DeviceError, match=r"^unknown device 'tpu': use cpu, cuda\[:N\] or npu\[:N\]$"):
        resolve_device("tpu")


@needs_no_cuda
@pytest.mark.parametrize(("spec", "shown"), [("cuda", "cuda:0"), ("cuda:0", "cuda:0"), ("cuda:1", "cuda:1")])
def test_cuda_without_cuda_says_so_with_the_torch_build(spec: str, shown: str) -> None:
    with pytest.raises(DeviceError) as error:
        resolve_device(spec)
    assert str(error.value) == f"{shown} requested but CUDA is not available (torch {torch.__version__})"


def test_cuda_index_out_of_range_names_the_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_device_modules(monkeypatch, available=True, count=2)
    with pytest.raises(DeviceError, match=r"^cuda:3 requested but only 2 CUDA device\(s\) are visible"):
        resolve_device("cuda:3")
    assert resolve_device("cuda") == torch.device("cuda", 0)


def test_npu_without_torch_npu_says_it_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # makes `import torch_npu` fail
    with pytest.raises(DeviceError) as error:
        resolve_device("npu:0")
    assert str(error.value) == "npu requested but torch_npu is not installed"


def test_broken_torch_npu_reports_its_import_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    package = tmp_path / "torch_npu"
    package.mkdir()
    message = "libascendcl.so: cannot open shared object file"
    (package / "__init__.py").write_text(f"raise ImportError({message!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    with pytest.raises(DeviceError, match="^npu requested but torch_npu failed to import: libascendcl.so"):
        resolve_device("npu")


def test_torch_npu_without_a_registered_backend_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "torch_npu.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    with pytest.raises(DeviceError, match="^npu:0 requested but torch .* has no npu backend$"):
        resolve_device("npu")


def test_npu_index_out_of_range_names_the_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    fake_device_modules(monkeypatch, available=True, count=1)
    with pytest.raises(DeviceError, match=r"^npu:4 requested but only 1 NPU device\(s\) are visible"):
        resolve_device("npu:4")


def test_npu_without_devices_says_npu_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    fake_device_modules(monkeypatch, available=False, count=0)
    with pytest.raises(DeviceError, match=r"^npu:0 requested but NPU is not available \(torch "):
        resolve_device("npu:0")


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16"])
def test_dtype_names_round_trip(name: str) -> None:
    assert dtype_name(resolve_dtype(name)) == name


def test_dtype_names_map_to_torch_dtypes() -> None:
    assert DTYPES == {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@pytest.mark.parametrize("name", ["fp32", "float64", "bf16", ""])
def test_unknown_dtype_lists_the_accepted_names(name: str) -> None:
    with pytest.raises(DTypeError) as error:
        resolve_dtype(name)
    assert str(error.value) == f"unknown dtype {name!r}: use float32, bfloat16, float16"
    assert isinstance(error.value, ValueError)


def test_errors_are_value_errors() -> None:
    assert issubclass(DeviceError, ValueError) and issubclass(DTypeError, ValueError)


def test_cpu_has_no_device_module_and_synchronize_is_a_no_op() -> None:
    assert device_module(torch.device("cpu")) is None
    synchronize(torch.device("cpu"))


def test_cuda_device_module_is_torch_cuda() -> None:
    assert device_module(torch.device("cuda", 0)) is torch.cuda


def test_device_info_on_cpu_has_every_key_and_is_json() -> None:
    info = device_info(torch.device("cpu"))
    assert set(info) == {
        "type", "index", "name", "cpu_name", "cpu_isa", "cpu_flags", "cpu_threads", "cpu_count", "torch",
        "cuda", "driver", "torch_npu", "cann",
    }
    assert info["cpu_isa"] == torch.backends.cpu.get_cpu_capability()
    assert set(info["cpu_flags"]) <= set(VECTOR_FLAGS)
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")),
                 [])
    assert info["cpu_flags"] == [flag for flag in VECTOR_FLAGS if flag in flags]
    assert info["type"] == "cpu" and info["index"] is None
    assert info["torch"] == torch.__version__
    assert isinstance(info["name"], str) and info["name"] == info["cpu_name"] != ""
    assert info["cpu_threads"] == torch.get_num_threads() >= 1
    assert info["cuda"] is info["driver"] is info["torch_npu"] is info["cann"] is None
    json.dumps(info)

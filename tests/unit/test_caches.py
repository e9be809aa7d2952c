"""tessel's on-disk caches cannot hurt (targets/opencl/cache.py, docs/opencl.md "Caches"): a truncated or
corrupt entry of the program cache, the calibration store or a tuning record file is found by its hash,
reported as one CacheWarning line naming the file, and rebuilt (a record: skipped); two processes filling
one cache folder at once never read half an entry. The OpenCL cases skip without a platform."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tessel.targets.opencl import cache
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.cache import CacheWarning, read_entry, write_entry
from tessel.targets.opencl.device import opencl_available
from tessel.targets.opencl.profile import Peaks, load_peaks, save_peaks
from tessel.targets.opencl.records import Record, read_records, write_records

NO_OPENCL = opencl_available()
needs_opencl = pytest.mark.skipif(NO_OPENCL is not None, reason=str(NO_OPENCL))
ROOT = Path(__file__).resolve().parents[2]


def _one_warning(caught: list[warnings.WarningMessage], *words: str) -> str:
    """The one CacheWarning caught: one line on stderr as Python shows it, holding `words`."""
    found = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(found) == 1, [str(w.message) for w in caught]
    shown = warnings.formatwarning(found[0].message, found[0].category, found[0].filename, found[0].lineno)
    assert shown.count("\n") == 1, shown
    for word in words:
        assert word in shown, shown
    return shown


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x20
    path.write_bytes(bytes(data))


# entries --------------------------------------------------------------------------------------------------
def test_entry_round_trip_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "e.bin"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert write_entry(str(path), b"payload \x00\xff\n")
        assert read_entry(str(path)) == b"payload \x00\xff\n"
        assert write_entry(str(path), b"") and read_entry(str(path)) == b""
        assert read_entry(str(tmp_path / "missing.bin")) is None  # missing is no warning
    assert os.listdir(path.parent) == ["e.bin"]


DAMAGE = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:-7]), "truncated"),
    "flipped-byte": (lambda p: _flip(p, len(p.read_bytes()) - 100), "sha256 does not match"),
    "wrong-magic": (lambda p: _flip(p, 0), "not a tessel cache entry"),
    "empty": (lambda p: p.write_bytes(b""), "empty file"),
    "header-only": (lambda p: p.write_bytes(p.read_bytes()[:20]), "truncated in its header"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_entry_warns_once_and_is_rebuilt(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "e.bin"
    payload = bytes(range(256)) * 40
    write_entry(str(path), payload)
    spoil, problem = DAMAGE[damage]
    spoil(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_entry(str(path)) is None
    _one_warning(caught, str(path), problem, "discarded and rebuilt")
    assert not path.exists()  # gone: the next reader rebuilds rather than warns again
    assert write_entry(str(path), payload) and read_entry(str(path)) == payload


def test_an_unwritable_cache_is_skipped(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    assert write_entry(str(blocker / "e.bin"), b"x") is False


# calibration store ----------------------------------------------------------------------------------------
def _fake_device(name: str) -> SimpleNamespace:
    """What device.fingerprint reads."""
    platform = SimpleNamespace(name="Fake", version="1.0")
    return SimpleNamespace(platform=platform, name=name, version="1", driver_version="1", max_compute_units=2)


def test_peaks_are_calibrated_on_first_use_and_stored(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """peaks_for calibrates a device it has no peaks for, once, and stores them per fingerprint: a second
    device (or a new driver: another fingerprint) is calibrated on its own first use."""
    from tessel.targets.opencl import profile

    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    made: list[str] = []

    def fake(device: SimpleNamespace) -> Peaks:
        made.append(device.name)
        return Peaks(50.0 + len(made), 10.0, 5.0, device.name, "2026-01-01", stream_gbps=8.0)

    monkeypatch.setattr(profile, "calibrate", fake)
    said: list[str] = []
    a, b = _fake_device("cpu"), _fake_device("cpu")
    b.driver_version = "2"
    assert profile.peaks_for(a, said.append).gflops == 51.0
    assert made == ["cpu"] and len(said) == 1 and "first use" in said[0]
    assert profile.peaks_for(a, said.append).gflops == 51.0 and made == ["cpu"] and len(said) == 1
    assert load_peaks(a) == profile.peaks_for(a)
    assert profile.peaks_for(b).gflops == 52.0 and load_peaks(a).gflops == 51.0
    # peaks stored by a tessel that did not measure the weight-streaming rate are measured again
    save_peaks(a, Peaks(40.0, 10.0, 5.0, "cpu", "2025-01-01"))
    assert profile.peaks_for(a).gflops == 53.0 and made == ["cpu", "cpu", "cpu"]


def test_a_corrupt_calibration_store_warns_and_reads_as_missing(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    d = _fake_device("cpu")
    peaks = Peaks(100.0, 20.0, 10.0, "cpu", "2026-01-01")
    store = Path(save_peaks(d, peaks))
    assert load_peaks(d) == peaks
    _flip(store, store.read_bytes().index(b"100.0"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_peaks(d) is None
    _one_warning(caught, str(store), "sha256", "tessel-run --calibrate")
    save_peaks(d, peaks)
    assert load_peaks(d) == peaks
    plain = json.dumps({dev.fingerprint(d): asdict(peaks)})  # the store of tessel before the hash
    store.write_text(plain)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_peaks(d) == peaks
        save_peaks(d, peaks)
        assert store.read_bytes().startswith(b"tessel-cache 1 ")
    store.write_text(plain[:-9])
    with pytest.warns(CacheWarning, match="calibration.json: not a JSON object; discarded"):
        assert load_peaks(d) is None
    store.write_bytes(b"\x89PNG")
    with pytest.warns(CacheWarning, match="not a tessel cache entry"):
        assert load_peaks(d) is None


# tuning records -------------------------------------------------------------------------------------------
def _rec(key: str, tile: int = 2) -> Record:
    return Record("kernel", key, "generic", "conv2d/1", {"tile": tile}, 10.0, 9.0, 10, date="2026-12-05")


def test_a_record_whose_checksum_fails_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    write_records(str(path), [_rec("k1"), _rec("k2"), _rec("k3")])
    lines = path.read_text().splitlines()
    assert all('"checksum":"' in line for line in lines)
    lines[1] = lines[1].replace('"tile":2', '"tile":4')  # a flipped byte that is still a valid record
    path.write_text("\n".join(lines) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [r.key for r in read_records(str(path))] == ["k1", "k3"]
    _one_warning(caught, f"{path}:2:", "checksum", "record skipped")


def test_records_without_checksums_still_read(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(asdict(_rec(k))) + "\n" for k in ("k1", "k2")))
    inputs = ROOT / "lit_tests" / "cli" / "Inputs"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.key for r in read_records(str(path))] == ["k1", "k2"]
        assert read_records(str(inputs / "records.jsonl"))  # the lit tests' files predate the checksum
        assert read_records(str(inputs / "records-a.jsonl"))


# programs -------------------------------------------------------------------------------------------------
KERNEL = "__kernel void scale(__global float *a) { int i = get_global_id(0); a[i] = a[i] * 2.0f + 1.0f; }\n"


def _build_and_run(source: str) -> np.ndarray:
    from tessel.targets.opencl import runtime

    cl = dev.cl()
    d = dev.pick_device()
    context = dev.context_for(d)
    prg = runtime.build_program(context, source, devices=[d])
    queue = cl.CommandQueue(context, d)
    a = np.arange(16, dtype=np.float32)
    buf = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    cl.Kernel(prg, "scale")(queue, (16,), None, buf)
    cl.enqueue_copy(queue, a, buf)
    queue.finish()
    return a


def _fresh(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    from tessel.targets.opencl import runtime

    monkeypatch.setenv("TESSEL_CACHE_DIR", str(folder))
    monkeypatch.setenv("TESSEL_PROGRAM_BINARIES", "always")  # on PoCL too (its own cache: "auto" skips)
    monkeypatch.setattr(runtime, "_PROGRAMS", {})  # as in a new process


@needs_opencl
def test_programs_load_from_the_cache_and_a_bad_entry_is_rebuilt(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    source = KERNEL + f"// {tmp_path.name}\n"
    want = np.arange(16, dtype=np.float32) * 2 + 1
    loads = cache.PROGRAM_LOADS
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        _fresh(monkeypatch, tmp_path)
        before = loads["source"]
        np.testing.assert_array_equal(_build_and_run(source), want)
        assert loads["source"] == before + 1
        (entry,) = (tmp_path / "opencl").glob("*.bin")
        _fresh(monkeypatch, tmp_path)
        before = loads["binary"]
        np.testing.assert_array_equal(_build_and_run(source), want)
        assert loads["binary"] == before + 1
    damages = [(lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "truncated"),
               (lambda p: _flip(p, len(p.read_bytes()) // 2), "sha256 does not match"),
               # sound by its hash, but the driver refuses the binary (here: not one)
               (lambda p: write_entry(str(p), cache._pack([b"not a binary"])), "does not load")]
    for spoil, problem in damages:
        spoil(entry)
        _fresh(monkeypatch, tmp_path)
        before = loads["source"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            np.testing.assert_array_equal(_build_and_run(source), want)
        _one_warning(caught, str(entry), problem, "discarded and rebuilt")
        assert loads["source"] == before + 1
        assert read_entry(str(entry)) is not None  # stored again, sound


@pytest.mark.parametrize(("setting", "pocl_cache", "platform", "stores"), [
    ("", "", "Portable Computing Language", False),  # PoCL keeps its own: tessel's copy would cost
    ("", "0", "Portable Computing Language", True),  # ... unless its cache is off
    ("", "", "Intel(R) OpenCL", True),
    ("always", "", "Portable Computing Language", True),
    ("never", "", "Intel(R) OpenCL", False),
])
def test_program_binaries_are_kept_unless_the_driver_keeps_its_own(
        monkeypatch: pytest.MonkeyPatch, setting: str, pocl_cache: str, platform: str, stores: bool) -> None:
    from types import SimpleNamespace

    for var, value in (("TESSEL_PROGRAM_BINARIES", setting), ("POCL_KERNEL_CACHE", pocl_cache)):
        if value:
            monkeypatch.setenv(var, value)
        else:
            monkeypatch.delenv(var, raising=False)
    device = SimpleNamespace(platform=SimpleNamespace(name=platform))
    assert cache.stores_binaries([device]) is stores


@needs_opencl
def test_a_driver_kept_program_is_built_and_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the driver keeps its own cache, tessel stores nothing and logs the build as the driver's."""
    from tessel.targets.opencl import runtime

    d = dev.pick_device()
    if cache.stores_binaries([d]):
        pytest.skip("this driver's programs are kept by tessel")
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runtime, "_PROGRAMS", {})
    mark = cache.BUILD_LOG.mark()
    np.testing.assert_array_equal(_build_and_run(KERNEL + f"// {tmp_path.name}\n"),
                                  np.arange(16, dtype=np.float32) * 2 + 1)
    (build,) = cache.BUILD_LOG.since(mark)
    assert (build.name, build.how, build.kernels) == ("program", "driver", 1)
    assert not (tmp_path / "opencl").exists() or not list((tmp_path / "opencl").glob("*.bin"))


# races ----------------------------------------------------------------------------------------------------
ENTRY_WORKER = textwrap.dedent("""
    import os, random, sys, time, warnings
    from tessel.targets.opencl.cache import CacheWarning, read_entry, write_entry
    from tessel.targets.opencl.profile import Peaks, load_peaks, save_peaks
    from types import SimpleNamespace

    warnings.simplefilter("error", CacheWarning)  # any bad entry seen fails this process
    folder, me, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    sizes = (50_000, 75_000, 100_000, 150_000)
    valid = {k: [random.Random(k * 10 + v).randbytes(n) for v, n in enumerate(sizes)] for k in range(3)}
    rng = random.Random(me)
    open(go + ".ready" + str(me), "w").close()
    while not os.path.exists(go):
        time.sleep(0.001)
    seen = 0
    for _ in range(200):
        k = rng.randrange(3)
        write_entry(os.path.join(folder, f"{k}.bin"), rng.choice(valid[k]))
        k = rng.randrange(3)
        got = read_entry(os.path.join(folder, f"{k}.bin"))
        assert got is None or got in valid[k], f"entry {k}: a payload no writer wrote"
        seen += got is not None
    os.environ["TESSEL_CACHE_DIR"] = folder
    device = SimpleNamespace(platform=SimpleNamespace(name="Fake", version="1"), name=f"dev{me}",
                             version="1", driver_version="1", max_compute_units=me)
    for i in range(20):
        save_peaks(device, Peaks(float(i), 1.0, 1.0))
        assert load_peaks(device) == Peaks(float(i), 1.0, 1.0)
    print(seen)
""")

PROGRAM_WORKER = textwrap.dedent("""
    import os, sys, time, warnings
    import numpy as np
    from tessel.targets.opencl import cache, device as dev
    from tessel.targets.opencl.cache import CacheWarning
    from tests.unit.test_caches import _build_and_run

    warnings.simplefilter("error", CacheWarning)
    go, source = sys.argv[1], sys.argv[2]
    dev.context_for(dev.pick_device())  # PoCL starts before the race
    open(go + ".ready" + sys.argv[3], "w").close()
    while not os.path.exists(go):
        time.sleep(0.001)
    a = _build_and_run(source)
    assert (a == np.arange(16, dtype=np.float32) * 2 + 1).all(), a
    print(sum(cache.PROGRAM_LOADS.values()), cache.PROGRAM_LOADS["source"])
""")


def _race(tmp_path: Path, script: str, args: Callable[[int, str], list[str]],
          env: dict[str, str]) -> list[str]:
    """Run `script` in two processes (`args(i, go)`: the arguments of process i), which start racing when
    the file `go` appears, once both are ready (`go`.ready<i>); their stdouts."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", script, *args(i, str(go))], env={**os.environ, **env},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (1, 2)]
    deadline = time.monotonic() + 30
    while not all(Path(f"{go}.ready{i}").exists() for i in (1, 2)) and time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.01)
    go.touch()
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and "Warning" not in err, err
    return [out for out, _ in outs]


def test_two_processes_filling_one_cache_never_read_half_an_entry(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    outs = _race(tmp_path, ENTRY_WORKER, lambda i, go: [str(folder), str(i), go], {})
    assert all(int(out) > 0 for out in outs)  # each read entries the other may have been writing
    assert sorted(os.listdir(folder)) == ["0.bin", "1.bin", "2.bin", "calibration.json",
                                          "calibration.json.lock"]  # no temporary file left
    table = json.loads(read_entry(str(folder / "calibration.json")) or b"{}")
    assert sorted(p["gflops"] for p in table.values()) == [19.0, 19.0]  # neither lost the other's device


@needs_opencl
def test_two_processes_building_one_program_into_a_fresh_cache(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    source = KERNEL + f"// {tmp_path.name}\n"
    outs = _race(tmp_path, PROGRAM_WORKER, lambda i, go: [go, source, str(i)],
                 {"TESSEL_CACHE_DIR": str(folder), "PYTHONPATH": str(ROOT),
                  "TESSEL_PROGRAM_BINARIES": "always"})
    loads = [tuple(map(int, out.split())) for out in outs]  # (programs loaded, of them built from source)
    assert all(n == 1 for n, _ in loads) and sum(built for _, built in loads) >= 1
    (entry,) = (folder / "opencl").glob("*.bin")
    assert read_entry(str(entry)) is not None
    assert [p.name for p in (folder / "opencl").iterdir()] == [entry.name]

"""Every command line of DLProf's user guide (ch. 4, 7, 10, 13, 15), with ``jlprof`` for
``dlprof``, gives exactly the files the guide names.

Each row: the guide's section, its command line as printed there (data, copied), the jlprof
command line run here, and the files the guide says appear. Where the guide profiles a
container's training script, the profiling step is replaced by a stand-in that writes what
``nsys profile`` writes (``nsys_profile.nsys-rep`` and ``.sqlite``: a fixture export) and records
the options it got; ``test_profile_command.py`` runs the real nsys. Placeholders (``<seconds>``,
``[<op_name_or_op_ID>]``) are filled in. nsys 2021.4+ writes ``.nsys-rep`` where the guide's
nsys wrote ``.qdrep`` (``QDREP`` below).
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

import jlprof.profiling
from jlprof.cli import main
from tests.fixtures.loops import small_training_export

QDREP = "nsys-rep"  # the guide's .qdrep
NSYS = {f"nsys_profile.{QDREP}", "nsys_profile.sqlite"}
DLDB = "dlprof_dldb.sqlite"
DB = "--database=nsys_profile.sqlite"  # the rows that analyse an existing profile

# (guide section, the guide's command line, jlprof's, files created; {} when none)
GUIDE: list[tuple[str, str, str, set[str]]] = [
    ("2.3", "dlprof python <train script>", "jlprof python train.py", NSYS | {DLDB}),
    ("4.3", "dlprof [training_script.py]", "jlprof train.py", NSYS | {DLDB}),
    ("4.3", "dlprof <args> [training_script.py]", "jlprof --key_node=optimizer_step train.py",
     NSYS | {DLDB}),
    ("4.4", 'dlprof --nsys_opts="-t osrt,cuda,nvtx" <training_script.py>',
     'jlprof --nsys_opts="-t osrt,cuda,nvtx" train.py', NSYS | {DLDB}),
    ("4.4", "dlprof --verbosity=quiet <training_script.py>",
     "jlprof --verbosity=quiet train.py", NSYS | {DLDB}),
    ("4.4", "--nsys_base_output_filename=<basename>",
     "jlprof --nsys_base_output_filename=run1 train.py",
     {f"run1.{QDREP}", "run1.sqlite", DLDB}),
    ("4.6", "--nsys_profile_range=true", "jlprof --nsys_profile_range=true train.py",
     NSYS | {DLDB}),
    ("4.7", "--delay <seconds>", "jlprof --delay 2 train.py", NSYS | {DLDB}),
    ("4.7", "--duration <seconds>", "jlprof --duration 3 train.py", NSYS | {DLDB}),
    ("4.8", "dlprof --database=[nsys_profile.sqlite] [<args>]",
     f"jlprof {DB} --iter_start=1", {DLDB}),
    ("4.8", "dlprof --database=[dbdlprof.sqlite] [<args>]",
     "jlprof --database=dlprof_dldb.sqlite --iter_start=1", set()),
    ("7.1", "--key_node=<key_node>", f"jlprof {DB} --key_node=optimizer_step", {DLDB}),
    ("7.2", "--iter_start <start_iter> --iter_stop <stop_iter>",
     f"jlprof {DB} --iter_start 2 --iter_stop 5", {DLDB}),
    ("10.1.1", "--reports=kernel,iteration,summary",
     f"jlprof {DB} --reports=kernel,iteration,summary",
     {"dlprof_kernel.csv", "dlprof_iteration.csv", "dlprof_summary.csv", DLDB}),
    ("10.1.1", "--reports iteration tensor node_op --",
     f"jlprof {DB} --reports iteration tensor node_op --",
     {"dlprof_iteration.csv", "dlprof_tensor.csv", "dlprof_node_op.csv", DLDB}),
    ("10.1.1", "--reports all", f"jlprof {DB} --reports all",
     {f"dlprof_{r}.csv" for r in ("summary", "detailed", "iteration", "kernel", "tensor",
                                  "op_type", "group_node", "expert_systems")} | {DLDB}),
    ("10.1.2", "--file_formats json", f"jlprof {DB} --reports=summary --file_formats json",
     {"dlprof_summary.json", DLDB}),
    ("10.1.2", "--file_formats=csv,json", f"jlprof {DB} --reports=summary --file_formats=csv,json",
     {"dlprof_summary.csv", "dlprof_summary.json", DLDB}),
    ("10.1.2", "--file_formats json csv --",
     f"jlprof {DB} --reports=summary --file_formats json csv --",
     {"dlprof_summary.csv", "dlprof_summary.json", DLDB}),
    ("10.1.3", "--reports=summary,iteration --file_formats=csv,json",
     f"jlprof {DB} --reports=summary,iteration --file_formats=csv,json",
     {"dlprof_summary.csv", "dlprof_summary.json", "dlprof_iteration.csv",
      "dlprof_iteration.json", DLDB}),
    ("10.1.3", "--profile_name <base_name>", f"jlprof {DB} --profile_name run1 --reports=summary",
     {"run1_summary.csv", "run1_dldb.sqlite"}),
    ("10.1.4", "--output_path <path/to/output>",
     f"jlprof {DB} --output_path out/dir --reports=summary",
     {"out/dir/dlprof_summary.csv", f"out/dir/{DLDB}"}),
    ("13.1.2", "dlprof --reports=summary,detail,iteration --iter_start 20 --iter_stop 80 python "
     "main.py --mode=train --iter_unit=batch --num_iter=100 --batch_size=128 --warmup_steps=1 "
     "--use_cosine_lr --label_smoothing 0.1 --lr_init=0.256 --lr_warmup_epochs=8 "
     "--momentum=0.875 --weight_decay=3.0517578125e-05 --use_tf_amp "
     "--data_dir=/data/train-val-tfrecord-480 --results_dir=./results",
     "jlprof --reports=summary,detail,iteration --iter_start 20 --iter_stop 80 python main.py "
     "--mode=train --iter_unit=batch --num_iter=100 --batch_size=128 --warmup_steps=1 "
     "--use_cosine_lr --label_smoothing 0.1 --lr_init=0.256 --lr_warmup_epochs=8 "
     "--momentum=0.875 --weight_decay=3.0517578125e-05 --use_tf_amp "
     "--data_dir=/data/train-val-tfrecord-480 --results_dir=./results",
     NSYS | {"dlprof_summary.csv", "dlprof_detailed.csv", "dlprof_iteration.csv", DLDB}),
    ("13.2.2", "dlprof /usr/bin/python tf_cnn_benchmarks.py --num_gpus=1 --batch_size=256 "
     "--model=mobilenet --device=gpu --gpu_indices=1 --data_name=imagenet "
     "--data_dir=/data/train-val-tfrecord-480 --num_batches=50 --use_fp16 "
     "--fp16_enable_auto_loss_scale",
     "jlprof /usr/bin/python tf_cnn_benchmarks.py --num_gpus=1 --batch_size=256 "
     "--model=mobilenet --device=gpu --gpu_indices=1 --data_name=imagenet "
     "--data_dir=/data/train-val-tfrecord-480 --num_batches=50 --use_fp16 "
     "--fp16_enable_auto_loss_scale", NSYS | {DLDB}),
    ("13.3.2", "dlprof --mode=pytorch -f true --reports=summary,detail,iteration,kernel,tensor "
     "--delay 60 --duration 60 python main.py --arch resnet50 -b 16 --training-only "
     "--report-file benchmark.json --epochs 90 --prof 100 /data/imagenet",
     "jlprof --mode=pytorch -f true --reports=summary,detail,iteration,kernel,tensor "
     "--delay 60 --duration 60 python main.py --arch resnet50 -b 16 --training-only "
     "--report-file benchmark.json --epochs 90 --prof 100 /data/imagenet",
     NSYS | {f"dlprof_{r}.csv" for r in ("summary", "detailed", "iteration", "kernel", "tensor")}
     | {DLDB}),
    ("13.3.4", "dlprof -f true --reports=summary,detail,iteration,kernel,tensor --delay 60 "
     "--duration 60 --iter_start=47 --iter_stop=111 python "
     "/workspace/examples/resnet50v1.5/main.py --arch resnet50 -b 16 --training-only "
     "--raport-file benchmark.json --epochs 90 --prof 100 --amp --static-loss-scale 256 "
     "/data/imagenet",
     "jlprof -f true --reports=summary,detail,iteration,kernel,tensor --delay 60 "
     "--duration 60 --iter_start=47 --iter_stop=111 python "
     "/workspace/examples/resnet50v1.5/main.py --arch resnet50 -b 16 --training-only "
     "--raport-file benchmark.json --epochs 90 --prof 100 --amp --static-loss-scale 256 "
     "/data/imagenet",
     NSYS | {f"dlprof_{r}.csv" for r in ("summary", "detailed", "iteration", "kernel", "tensor")}
     | {DLDB}),
    ("15.1", "dlprof [optional switch_options] [application] [optional application_options]",
     "jlprof -f true python train.py --epochs 1", NSYS | {DLDB}),
    ("15.1", "dlprof [optional switch_options] --database=dbdlprof.sqlite",
     "jlprof -f true --database=dlprof_dldb.sqlite", set()),
    # -m simple: only the kernel report, and no viewer database (guide §3.1, §15.1.4)
    ("15.1", "-m simple", f"jlprof -m simple {DB} --reports=all", {"dlprof_kernel.csv"}),
    ("15.1", "--mode=simple", f"jlprof --mode=simple {DB} --reports=kernel",
     {"dlprof_kernel.csv"}),
    ("15.1.2", '--nsys_options="-t cuda,nvtx -s none"',
     'jlprof --nsys_options="-t cuda,nvtx -s none" train.py', NSYS | {DLDB}),
    ("15.1.2", "--nsys_base_name [base name]", "jlprof --nsys_base_name run2 train.py",
     {f"run2.{QDREP}", "run2.sqlite", DLDB}),
    ("15.1.2", "-y / --delay, -d / --duration", "jlprof -y 1 -d 5 train.py", NSYS | {DLDB}),
    ("15.1.2", "--detailed_mode true", f"jlprof {DB} --detailed_mode true", {DLDB}),
    ("15.1.4", "--base_name <profile name>", f"jlprof {DB} --base_name run3 --reports summary",
     {"run3_summary.csv", "run3_dldb.sqlite"}),
    ("15.1.4", "--formats csv, json", f"jlprof {DB} --reports=kernel --formats=csv,json",
     {"dlprof_kernel.csv", "dlprof_kernel.json", DLDB}),
    ("15.1.4", "--dump_model_data true", f"jlprof {DB} --dump_model_data true",
     {"dlprof_model_data.json", DLDB}),
]  # fmt: skip


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """120 iterations, so the tutorials' ranges (20..80, 47..111) exist."""
    return small_training_export(tmp_path_factory.mktemp("guide") / "run.sqlite", steps=120)


@pytest.fixture
def profiled(monkeypatch, export) -> list[dict[str, Any]]:
    """``nsys profile`` replaced: writes its two files, records what jlprof asked of it."""
    calls: list[dict[str, Any]] = []

    def fake(command, *, output, base_name="nsys_profile", **kw):
        calls.append({"command": list(command), "base_name": base_name, **kw})
        output.mkdir(parents=True, exist_ok=True)
        (output / f"{base_name}.{QDREP}").write_bytes(b"report")
        return Path(shutil.copy(export, output / f"{base_name}.sqlite")), 0

    monkeypatch.setattr(jlprof.profiling, "profile_run", fake)
    return calls


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("section", "guide", "line", "files"), GUIDE,
                         ids=[f"{g[0]}:{g[1][:40]}" for g in GUIDE])  # fmt: skip
def test_guide_command_line(section, guide, line, files, tmp_path, monkeypatch, export, profiled):
    monkeypatch.chdir(tmp_path)
    if DB in line:
        shutil.copy(export, tmp_path / "nsys_profile.sqlite")
    if "--database=dlprof_dldb.sqlite" in line:  # made by an earlier run, as the guide does
        assert main([f"--database={export}", "-v", "quiet"]) == 0
    before = _files(tmp_path)
    argv = shlex.split(line)
    assert argv[0] == "jlprof"
    assert main(argv[1:]) == 0
    assert _files(tmp_path) - before == files
    if DB not in line and "--database" not in line:  # profiled: the program got its arguments
        (call,) = profiled
        program_at = next(i for i, w in enumerate(argv) if w in ("train.py", "python",
                                                                  "/usr/bin/python"))  # fmt: skip
        assert call["command"] == argv[program_at:]


def test_profiling_options_reach_nsys(tmp_path, monkeypatch, profiled) -> None:
    """The Nsight Systems options of §4.4-4.7 and §15.1.2 are what the profiling run gets."""
    monkeypatch.chdir(tmp_path)
    line = '--nsys_options="-t osrt,cuda,nvtx" -y 2 -d 5 --nsys_profile_range=true '
    assert main(shlex.split(line + "--nsys_base_name=b python t.py")) == 0
    (call,) = profiled
    assert call["nsys_opts"] == "-t osrt,cuda,nvtx"
    assert (call["delay"], call["duration"], call["base_name"]) == (2.0, 5.0, "b")
    assert call["profile_range"] is True and call["command"] == ["python", "t.py"]


def test_profile_range_is_the_cuda_profiler_capture_range() -> None:
    """§4.6 --nsys_profile_range=true: nsys collects between cudaProfilerStart and Stop."""
    from jlprof import nsys

    cmd = nsys.profile_command(["python", "t.py"], "out/nsys_profile",
                               capture_range="cudaProfilerApi", nsys=_fake_nsys())  # fmt: skip
    assert "--capture-range=cudaProfilerApi" in cmd.argv


def _fake_nsys():
    from jlprof.nsys import locate

    return locate.NsysInfo(Path("/opt/nsys/bin/nsys"), (2022, 4, 2, 1), "2022.4.2.1")


def test_no_dldb_when_asked(tmp_path, monkeypatch, export) -> None:
    """``--dldb=false`` (jlprof's own): the reports only, e.g. for a quick re-aggregation."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(export, tmp_path / "nsys_profile.sqlite")
    assert main([DB, "--reports=kernel", "--dldb=false", "-v", "quiet"]) == 0
    assert _files(tmp_path) == {"nsys_profile.sqlite", "dlprof_kernel.csv"}

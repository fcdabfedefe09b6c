"""`pip install .` (not editable) of a clean checkout: every console command answers --help with
exit status 0, and the installed tree holds only the library packages (no demo, bench, tests or
root script modules at the top level)."""

import glob
import os
import re
import shutil
import subprocess
import sysconfig
import venv

import pytest

from tests import paths

COMMANDS = ("bert-create-pretraining-data", "bert-run-pretraining", "bert-run-classifier",
            "bert-run-swag", "bert-run-squad", "bert-run-ner", "bert-extract-features",
            "bert-convert-checkpoint", "bert-build-vocab", "bert-squad-eval")
PACKAGES = {"bert_cli", "bert_common", "bert_tasks", "data", "modeling"}


def _clean_checkout(dest: str) -> None:
    """The files a clean clone has: tracked, plus untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"],
                            cwd=paths.ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        src = os.path.join(paths.ROOT, name)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, name))


@pytest.mark.slow
def test_pip_install_gives_commands_and_only_library_packages(tmp_path):
    if shutil.which("git") is None or not os.path.isdir(os.path.join(paths.ROOT, ".git")):
        pytest.fail("needs a git checkout")
    checkout = tmp_path / "checkout"
    _clean_checkout(str(checkout))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # The dependencies (TensorFlow & co.) are the running environment's, made visible through a
    # .pth file, so pip finds them installed and downloads nothing; the project itself is built
    # from the checkout (setuptools from the running environment too: no build isolation).
    with open(os.path.join(site, "_deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-build-isolation",
                              "--no-index", str(checkout)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]

    installed = {os.path.basename(p).split(".")[0] for p in os.listdir(site)
                 if not p.endswith((".dist-info", ".pth")) and not p.startswith(("_", "."))}
    assert PACKAGES <= installed, installed
    assert not installed & {"demo", "bench", "tests", "run_classifier", "run_pretraining",
                            "run_squad", "run_swag", "create_pretraining_data",
                            "extract_features", "convert_checkpoint"}, installed
    assert glob.glob(os.path.join(site, "modeling", "kernels", "bert_cpu_ops.cc"))

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)
    for command in COMMANDS:
        exe = env_dir / "bin" / command
        assert exe.exists(), command
        proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True,
                              cwd=str(tmp_path), env=env, timeout=120)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
        assert "--" in proc.stdout, (command, proc.stdout[:500])
    # --help lists the shared flags too, not only the tool's own.
    proc = subprocess.run([str(env_dir / "bin" / "bert-run-classifier"), "--help"],
                          capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=120)
    for flag in ("task_name", "strategy", "mixed_precision", "tpu_name", "use_xla"):
        assert re.search(r"--(\[no\])?%s:" % flag, proc.stdout), flag
    # The installed library is the one imported, not the checkout.
    proc = subprocess.run([python, "-c", "import modeling, data; print(modeling.__file__)"],
                          capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith(site), proc.stdout + proc.stderr

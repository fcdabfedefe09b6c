"""The one shared harness of ``bench/``: the argument set every benchmark draws from
(``parser``), and the plumbing of the interleaved-rounds speed benchmarks (speed/inference,
speed/pretraining, speed/classifier_throughput, speed/finetuning; profiling/profile_step borrows
the model flags and the GEMM peak): the peers' venvs, the worker processes, the rounds and the
median / best / ratio summary. ``python -m bench`` lists the benchmarks (bench/__main__.py).

Only the standard library is imported at module level: worker processes import this module
under ``bench/.venvs/hf`` too, which has no TensorFlow. Import it as ``from bench import harness``
after putting the repository root (``ROOT``) on ``sys.path``.

Worker protocol. Each engine kind (ours / keras-hub / HF) runs in its own long-lived worker
process: the bench module itself, started by the lead as ``PYTHON -m bench.KIND.NAME --worker
KIND FLAGS...`` under that kind's interpreter (``cwd=ROOT``, ``PYTHONPATH=ROOT``,
``TF_CPP_MIN_LOG_LEVEL=3``).
An engine is a callable ``engine(n)`` that does ``n`` units of work (forward passes, train steps,
dev-set passes). Lines of text, one message each:

* worker -> lead, stdout: ``READY <json>`` once, after every engine is built and warmed up;
  ``<json>`` is ``{"engines": [names in measuring order], "info": {...bench-specific...}}``;
* lead -> worker, stdin: ``RUN <n> <name>``; worker -> lead: ``TIME <seconds>``, the wall time
  (``time.perf_counter``) of ``engine(n)``;
* lead -> worker: ``MEMORY``; worker -> lead: ``MEMORY <json>``, ``{"peak_rss_bytes": ...,
  "built_peak_rss_bytes": ...}``: the process's peak resident set so far and before the warm-up
  (``VmHWM``: the most the process held at once since it started, the interpreter, the framework
  and the data included; not its child processes);
* lead -> worker: ``STOP`` (or end of stdin): the worker returns.

The lead ignores any other stdout line; workers log to stderr. Workers are set up one at a time
(compilation would disturb the others), then timed in interleaved rounds, one engine at a time,
so that a shared, noisy CPU affects all engines alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENVS = os.path.join(ROOT, "bench", ".venvs")
KH_PYTHON = os.path.join(VENVS, "kerashub", "bin", "python")
HF_PYTHON = os.path.join(VENVS, "hf", "bin", "python")
OUT_DIR = os.path.join(ROOT, "bench", "out")

Engine = Callable[[int], Any]


# ------------------------------------------------------------------------------------ venvs


def _site_packages(python: str) -> str:
    return subprocess.check_output(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True).strip()


def ensure_venvs(kerashub: bool, hf: bool) -> None:
    """Creates the peers' venvs if missing (pip, from the configured package sources).

    ``bench/.venvs/kerashub``: keras-hub on top of the project's TensorFlow/Keras (a .pth file
    points at this interpreter's site-packages); ``bench/.venvs/hf``: torch 2.13.0 CPU +
    transformers.
    """
    if kerashub and not os.path.exists(KH_PYTHON):
        folder = os.path.dirname(os.path.dirname(KH_PYTHON))
        print("creating %s (keras-hub on top of the project's TensorFlow)" % folder,
              file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", folder], check=True)
        with open(os.path.join(_site_packages(KH_PYTHON), "_project_venv.pth"), "w") as f:
            f.write(_site_packages(sys.executable) + "\n")
        subprocess.run([KH_PYTHON, "-m", "pip", "install", "-q", "keras-hub"], check=True)
    if hf and not os.path.exists(HF_PYTHON):
        folder = os.path.dirname(os.path.dirname(HF_PYTHON))
        print("creating %s (torch 2.13.0 CPU + transformers)" % folder, file=sys.stderr)
        subprocess.run(["python3", "-m", "venv", folder], check=True)
        subprocess.run([HF_PYTHON, "-m", "pip", "install", "-q", "torch==2.13.0", "transformers",
                        "safetensors", "numpy"], check=True)


# ----------------------------------------------------------------------------- arguments

MODEL_FLAGS = ("layers", "hidden", "heads", "intermediate", "batch_size", "seq_length",
               "predictions")


def add_model_flags(parser: argparse.ArgumentParser, batch_size: int = 8) -> None:
    """The model shape flags (``MODEL_FLAGS``): BERT-base, batch 8 x sequence 128 by default,
    20 masked predictions."""
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--batch_size", type=int, default=batch_size)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20,
                        help="masked positions per sequence (pre-training step)")


def dims_of(args) -> dict:
    """The shape of ``add_model_flags``' flags as one dict (BERT's vocabulary size)."""
    return dict(vocab=30522, layers=args.layers, hidden=args.hidden, heads=args.heads,
                intermediate=args.intermediate, batch=args.batch_size, seq=args.seq_length,
                predictions=args.predictions)


def encoder_gflop(d: dict) -> float:
    """Matmul GFLOP of one sequence's forward pass through the encoder (2 per multiply-add):
    per layer the Q/K/V/output projections, the two feed-forward matmuls, scores and the
    weighted sum."""
    s, h, i = d["seq"], d["hidden"], d["intermediate"]
    return d["layers"] * 2 * s * (4 * h * h + 2 * h * i + 2 * s * h) / 1e9


# The arguments several benchmarks share, defined once: name -> argparse keywords (but the
# default, which each benchmark gives). ``FLAG`` marks an on/off flag (``store_true``).
FLAG = "flag"
COMMON: Dict[str, dict] = {
    # how long / how often
    "rounds": dict(type=int, help="interleaved timing rounds"),
    "iters": dict(type=int, help="units of work per measurement"),
    "repeats": dict(type=int, help="timed runs (the best is kept)"),
    "quick": dict(action=FLAG, help="a smaller, faster run"),
    # where
    "work_dir": dict(help="folder of the intermediate files and outputs"),
    "input_file": dict(help="input text"),
    "vocab_file": dict(help="WordPiece vocabulary"),
    "limit": dict(type=int, help="first N examples / lines only (0: all)"),
    # sizes
    "batch_size": dict(type=int, help="sequences / lines per batch"),
    "max_seq_length": dict(type=int, help="tokens per sequence"),
    "doc_stride": dict(type=int, help="SQuAD: tokens between windows of a long context"),
    "max_query_length": dict(type=int, help="SQuAD: question tokens kept"),
    "dupe_factor": dict(type=int, help="create_pretraining_data: passes over the corpus"),
    # fine-tuning runs
    "seeds": dict(help="comma-separated seeds, one run each"),
    "seed": dict(type=int, help="random seed"),
    "sides": dict(help="comma-separated sides to run"),
    "epochs": dict(type=float, help="training epochs"),
    "learning_rate": dict(type=float, help="peak learning rate"),
    "hf_threads": dict(type=int, help="torch threads of the HF side"),
    "hf_optimizer": dict(choices=["bert_adam", "adamw"],
                         help="HF side's update: the original BERT Adam, or torch AdamW"),
}


def parser(doc: str, peers: Sequence[str] = (), model: bool = False,
           helps: Optional[Dict[str, str]] = None, **defaults: Any) -> argparse.ArgumentParser:
    """The argument parser of a benchmark, with the shared arguments it needs; the benchmark
    adds only its own to it.

    ``doc``: the module docstring, whose first line is the description. ``peers``: the peer
    engine kinds it compares with ("kerashub", "hf"): ``--worker {ours,PEERS}`` (the lead starts
    itself as a worker process with it), ``--skip_PEER`` for each, ``--setup_only`` (create the
    peers' venvs and stop). ``model``: the model shape flags (``add_model_flags``; ``batch_size``
    in ``defaults`` sets its default). ``defaults``: ``NAME=default`` for each argument of
    ``COMMON`` it takes (``NAME=True`` for a flag); ``helps``: a help text of its own for some.
    """
    helps = helps or {}
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    if peers:
        p.add_argument("--worker", choices=["ours"] + list(peers),
                       help="internal: run as this kind's worker process")
    if model:
        add_model_flags(p, defaults.pop("batch_size", 8))
    for name, default in defaults.items():
        if name not in COMMON:
            raise TypeError("harness.parser: no shared argument %r (COMMON has %s)"
                            % (name, ", ".join(COMMON)))
        spec = dict(COMMON[name])
        if name in helps:
            spec["help"] = helps[name]
        if spec.get("action") == FLAG:
            if default:
                p.add_argument("--" + name, action="store_true", help=spec["help"])
            continue
        p.add_argument("--" + name, default=default, **spec)
    for peer in peers:
        p.add_argument("--skip_" + peer, action="store_true",
                       help="leave out the %s engines" % peer)
    if peers:
        p.add_argument("--setup_only", action="store_true",
                       help="create the peers' venvs (bench/.venvs) and stop")
    return p


def flags_of(args: argparse.Namespace, keys: Iterable[str]) -> List[str]:
    """``["--key", str(args.key), ...]``: the lead's flags a worker must see too."""
    out: List[str] = []
    for key in keys:
        out += ["--" + key, str(getattr(args, key))]
    return out


def _runs(args: argparse.Namespace, peer: str) -> bool:
    """Whether the lead runs ``peer``'s engines: one of its ``parser(peers=...)``, not skipped."""
    return not getattr(args, "skip_" + peer, True)


def set_up_peers(args: argparse.Namespace) -> bool:
    """Lead side: creates the venvs of the peers not skipped; False after ``--setup_only``."""
    ensure_venvs(_runs(args, "kerashub"), _runs(args, "hf"))
    return not args.setup_only


def peers(args: argparse.Namespace) -> List[Tuple[str, str]]:
    """(python, kind) of the workers to start: ours, then keras-hub and HF unless skipped."""
    kinds = [(sys.executable, "ours")]
    if _runs(args, "kerashub"):
        kinds.append((KH_PYTHON, "kerashub"))
    if _runs(args, "hf"):
        kinds.append((HF_PYTHON, "hf"))
    return kinds


# ---------------------------------------------------------------------------- worker side


def repeated(fn: Callable[[], Any]) -> Engine:
    """An engine that calls ``fn()`` ``n`` times."""
    def run(n: int) -> None:
        for _ in range(n):
            fn()
    return run


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far, in bytes: ``VmHWM`` of /proc/self/status
    (reset at exec; ``getrusage``'s ``ru_maxrss`` is not: a worker would start at the lead's
    peak). Child processes (torch.compile's compile workers) are not counted."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status")


GEMM_N = 2048  # the peak's matmul: GEMM_N^3, large enough that oneDNN runs at its best rate


def gemm_peak_engine(dtype: str, n: int = GEMM_N) -> Engine:
    """Worker side (TensorFlow): an engine doing one ``n``^3 ``tf.matmul`` in ``dtype``
    ("float32" / "bfloat16") per unit; ``gemm_rate`` turns its time into GFLOP/s. The benches'
    MFU columns divide by this measured peak, not by a datasheet figure."""
    import tensorflow as tf

    a = tf.cast(tf.random.normal((n, n), dtype=tf.float32), dtype)
    fn = tf.function(lambda x: tf.reduce_sum(tf.cast(tf.matmul(x, x), tf.float32)))

    def run(units: int) -> None:
        for _ in range(units):
            fn(a).numpy()
    return run


def gemm_rate(units: int, seconds: float, n: int = GEMM_N) -> float:
    """GFLOP/s of ``units`` ``n``^3 matmuls in ``seconds``."""
    return units * 2 * n ** 3 / seconds / 1e9


def serve(engines: Dict[str, Engine], warmup: Sequence[int] = (1,),
          info: Optional[dict] = None, log_warmup: bool = False) -> None:
    """Worker side: warms every engine up (``engine(n)`` for each ``n`` of ``warmup``), sends
    ``READY`` (engine names in ``engines``' order, ``info``) and answers ``RUN`` and ``MEMORY``
    until ``STOP`` (``MEMORY``'s "built" peak is the one before the warm-up)."""
    built = peak_rss_bytes()
    for name, fn in engines.items():
        start = time.perf_counter()
        for n in warmup:
            fn(n)
        if log_warmup:
            print("warm-up %s: %.1fs" % (name, time.perf_counter() - start), file=sys.stderr,
                  flush=True)
    print("READY " + json.dumps({"engines": list(engines), "info": info or {}}), flush=True)
    for line in sys.stdin:
        parts = line.strip().split(" ", 2)
        if parts[0] == "MEMORY":
            print("MEMORY " + json.dumps({"peak_rss_bytes": peak_rss_bytes(),
                                          "built_peak_rss_bytes": built}), flush=True)
            continue
        if parts[0] != "RUN":
            break
        n, name = int(parts[1]), parts[2]
        start = time.perf_counter()
        engines[name](n)
        print("TIME %.6f" % (time.perf_counter() - start), flush=True)


# ------------------------------------------------------------------------------ lead side


def module_of(script: str) -> str:
    """``bench.speed.inference`` of ``ROOT/bench/speed/inference.py``."""
    rel = os.path.relpath(os.path.abspath(script), ROOT)
    if rel.startswith(os.pardir) or not rel.endswith(".py"):
        raise ValueError("%s: not a module of this checkout" % script)
    return rel[:-3].replace(os.sep, ".")


class Worker:
    """A worker process (one engine kind) driven over stdin/stdout (see the module docstring)."""

    def __init__(self, python: str, script: str, kind: str, flags: Sequence[str]):
        # As a module (``-m bench.speed.NAME``), not a file: the script's folder must not come
        # first on the worker's sys.path (it would shadow modules such as the root's scripts).
        cmd = [python, "-m", module_of(script), "--worker", kind] + list(flags)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
        self.kind = kind
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=ROOT)

    def ready(self) -> dict:
        """Waits for ``READY``; returns its payload ``{"engines": [...], "info": {...}}``."""
        for line in self.proc.stdout:
            if line.startswith("READY "):
                return json.loads(line[6:])
        raise RuntimeError("worker %s died during set-up (exit %s)"
                           % (self.kind, self.proc.wait()))

    def _ask(self, request: str, answer: str) -> str:
        """Sends ``request``; returns the rest of the worker's first line starting ``answer``."""
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(answer + " "):
                return line[len(answer) + 1:]
        raise RuntimeError("worker %s died" % self.kind)

    def time(self, name: str, n: int) -> float:
        """Seconds the worker took for ``n`` units of engine ``name``."""
        return float(self._ask("RUN %d %s" % (n, name), "TIME"))

    def memory(self) -> dict:
        """The worker's peak resident set so far and once built (see ``MEMORY``)."""
        return json.loads(self._ask("MEMORY", "MEMORY"))

    def close(self) -> None:
        """Asks the worker to stop; one that does not within 120 s is killed."""
        try:
            self.proc.stdin.write("STOP\n")
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def close_all(workers: Sequence[Worker]) -> None:
    """Closes every worker, also when closing one of them fails (the first error is raised)."""
    error = None
    for w in workers:
        try:
            w.close()
        except Exception as e:  # noqa: BLE001 - the others must still be closed
            error = error or e
    if error is not None:
        raise error


def start_workers(script: str, kinds: Sequence[Tuple[str, str]], flags: Sequence[str]
                  ) -> Tuple[List[Worker], List[Tuple[str, Worker]], dict]:
    """Starts one worker per (python, kind), each after the previous one is ready.

    Returns the workers, the (engine name, worker) pairs in measuring order and the merged
    ``info`` of their READY reports. On a failure the workers already started are closed.
    """
    workers: List[Worker] = []
    engines: List[Tuple[str, Worker]] = []
    info: dict = {}
    try:
        for python, kind in kinds:
            w = Worker(python, script, kind, flags)
            workers.append(w)
            report = w.ready()
            engines += [(name, w) for name in report["engines"]]
            info.update(report["info"])
    except BaseException:
        for w in workers:
            w.proc.kill()
            w.proc.wait()
        raise
    return workers, engines, info


def run_rounds(workers: Sequence[Worker], engines: Sequence[Tuple[str, Worker]], rounds: int,
               n: int, rate: Callable[[str, float], float], digits: int = 1
               ) -> Dict[str, List[float]]:
    """Times every engine ``rounds`` times (``n`` units a call, one engine at a time), then
    closes the workers. ``rate(name, seconds)`` turns a time into the figure kept; returns
    ``{name: [figure per round]}`` and logs each round to stderr."""
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg(), file=sys.stderr)
    rates: Dict[str, List[float]] = {name: [] for name, _ in engines}
    try:
        for r in range(rounds):
            for name, w in engines:
                rates[name].append(rate(name, w.time(name, n)))
            print("round %d/%d: %s" % (r + 1, rounds, ", ".join(
                "%s %.*f" % (name, digits, rates[name][-1]) for name, _ in engines)),
                file=sys.stderr)
    finally:
        close_all(workers)
    return rates


def summarize(samples: Sequence[float], reference: Optional[Sequence[float]]
              ) -> Tuple[float, float, float]:
    """(median, best, median of the per-round ratios samples / reference; NaN without one)."""
    ratio = (statistics.median(a / b for a, b in zip(samples, reference))
             if reference else float("nan"))
    return statistics.median(samples), max(samples), ratio


def read_json(name: str, default: Any) -> Any:
    """``bench/out/<name>`` as written by ``write_json``, or ``default`` when there is none."""
    path = os.path.join(OUT_DIR, name)
    if not os.path.exists(path):
        return default
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(name: str, obj: Any) -> str:
    """Writes ``obj`` to ``bench/out/<name>`` atomically (lead side: needs the project's
    ``bert_common`` package); returns the path."""
    sys.path.insert(0, ROOT)
    from bert_common.atomic import atomic_open

    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, name)
    with atomic_open(path) as f:
        json.dump(obj, f, indent=1)
    return path


SHARED = os.environ.get("BERT_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))
DERIVED_CORPUS = os.path.join(SHARED, "data", "pretrain", "derived_pretrain_corpus.txt")
UNCASED_VOCAB = os.path.join(SHARED, "data", "vocab", "bert-base-uncased-vocab.txt")


def sharded_records(work_dir: str, num_shards: int = 16, dupe_factor: int = 3) -> str:
    """Pre-training records of the derived corpus (seq 128), ``num_shards`` shards made by
    create_pretraining_data.py in ``work_dir``; returns their prefix (``<prefix>-*``)."""
    prefix = os.path.join(work_dir, "records")
    subprocess.run([sys.executable, os.path.join(ROOT, "create_pretraining_data.py"),
                    "--input_file=%s" % DERIVED_CORPUS, "--vocab_file=%s" % UNCASED_VOCAB,
                    "--output_file=%s" % prefix, "--num_shards=%d" % num_shards,
                    "--dupe_factor=%d" % dupe_factor, "--num_workers=2",
                    "--show_progress=false"], check=True)
    return prefix

"""The JAX-backend checks and timings for an accelerator (docs/jax.md), one script.

Runs without TensorFlow: Keras on JAX, this project on ``PYTHONPATH``. Phases (each printed as a
JSON line, and all of them written to ``--out``):

1. ``golden``: the encoder forward of the public goldens (tiny, tiny_wide_init; weights and
   outputs exported to npz by ``--export_golden``, since a TF1 checkpoint needs TensorFlow to
   read) at JAX's highest matmul precision, against the original's outputs (tolerance 1e-5);
2. ``peak``: the bf16 matmul rate (8192^3) the MFU figures are relative to;
3. ``pretrain``: BERT-base pre-training steps (MLM with 20 predictions + NSP, the original's
   clipped AdamWeightDecay and schedule, ``mixed_bfloat16``, seq 128) at each ``--batches``:
   sequences per second over ``--steps`` compiled steps, and MFU;
4. ``infer``: BERT-base encoder forward, bfloat16 weights, batch 256, seq 128;
5. ``hf`` (``--peers``, where PyTorch and transformers are installed): HF
   ``BertForPreTraining`` bf16 autocast + fused AdamW, eager and ``torch.compile``, batch 64.

Usage (on the device: ``KERAS_BACKEND=jax``)::

    python -m bench.jax_device --export_golden .device_data      # here, with TensorFlow
    KERAS_BACKEND=jax python -m bench.jax_device --golden .device_data --out result.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
GOLDENS = ("tiny", "tiny_wide_init")
RESULTS = []


def report(phase: str, **values) -> None:
    values = dict(phase=phase, **values)
    RESULTS.append(values)
    print(json.dumps(values), flush=True)


def export_golden(folder: str, golden_root: str) -> None:
    """Writes each golden's TF1 weights (npz by TF1 name), outputs and config (needs TF)."""
    import shutil

    from modeling.checkpoints import tf1

    os.makedirs(folder, exist_ok=True)
    for name in GOLDENS:
        src = os.path.join(golden_root, name)
        np.savez(os.path.join(folder, name + "_weights.npz"),
                 **tf1.read_tf1_checkpoint(os.path.join(src, "bert_model.ckpt")))
        shutil.copy(os.path.join(src, "outputs.npz"), os.path.join(folder, name + "_outputs.npz"))
        shutil.copy(os.path.join(src, "bert_config.json"),
                    os.path.join(folder, name + "_bert_config.json"))


def golden(folder: str) -> None:
    import jax

    import modeling
    from modeling.checkpoints import tf1

    with jax.default_matmul_precision("highest"):
        for name in GOLDENS:
            config = modeling.BertConfig.from_json_file(
                os.path.join(folder, name + "_bert_config.json"))
            model = modeling.BertModel(config)
            arrays = dict(np.load(os.path.join(folder, name + "_weights.npz")))
            tf1.assign_tf1_values(model, tf1.array_source(name, arrays))
            g = dict(np.load(os.path.join(folder, name + "_outputs.npz")))
            out = model({"input_ids": g["input_ids"], "input_mask": g["input_mask"],
                         "segment_ids": g["token_type_ids"]})
            diffs = {k: float(np.max(np.abs(np.asarray(out[k], np.float64) - g[k])))
                     for k in ("sequence_output", "pooled_output", "embedding_output")}
            report("golden", name=name, device=str(jax.devices()[0]), max_abs_diff=diffs,
                   ok=all(d <= 1e-5 for d in diffs.values()))


def matmul_peak(n: int = 8192) -> float:
    import jax
    import jax.numpy as jnp

    a = jnp.ones((n, n), jnp.bfloat16)
    f = jax.jit(lambda x, y: x @ y)
    f(a, a).block_until_ready()
    start = time.perf_counter()
    for _ in range(20):
        r = f(a, a)
    r.block_until_ready()
    tflops = 20 * 2 * n ** 3 / (time.perf_counter() - start) / 1e12
    report("peak", n=n, bf16_matmul_tflops=round(tflops, 3))
    return tflops


def _pretraining_batch(rng, batch, seq, preds):
    ids = rng.integers(1000, 30000, size=(batch, seq)).astype(np.int32)
    return {"input_ids": ids, "input_mask": np.ones((batch, seq), np.int32),
            "segment_ids": np.concatenate([np.zeros((batch, seq // 2), np.int32),
                                           np.ones((batch, seq - seq // 2), np.int32)], 1),
            "masked_lm_positions": np.sort(rng.choice(np.arange(1, seq), (batch, preds)),
                                           axis=1).astype(np.int32),
            "masked_lm_ids": rng.integers(1000, 30000, size=(batch, preds)).astype(np.int32),
            "masked_lm_weights": np.ones((batch, preds), np.float32),
            "next_sentence_labels": rng.integers(0, 2, size=(batch, 1)).astype(np.int32)}


def train_flops_per_sequence(seq: int, preds: int) -> float:
    """Matmul FLOPs of one sequence's training step (forward + backward = 3x forward)."""
    h, i, layers, v = BASE["hidden_size"], BASE["intermediate_size"], 12, BASE["vocab_size"]
    per_token = layers * (2 * 4 * h * h + 2 * 2 * h * i)  # q, k, v, out; feed-forward
    attention = layers * 2 * 2 * seq * seq * h  # scores and context
    heads = preds * (2 * h * h + 2 * h * v) + 2 * h * h  # MLM transform + tied output; pooler
    return 3.0 * (seq * per_token + attention + heads)


def pretrain(batches, steps: int, peak: float, seq: int = 128, preds: int = 20,
             dropout: bool = True) -> None:
    import jax
    import keras

    import modeling
    from modeling.training.backends.jax import steps as jax_steps

    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        rates = {} if dropout else dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        config = modeling.BertConfig(**BASE, **rates)
        model = modeling.BertPretrainingModel(config, seq_length=seq)
        optimizer = modeling.create_optimizer(1e-4, 10000, 100)
        optimizer.build(model.trainable_variables)
        step = jax_steps.make_train_step(model, optimizer)
        rng = np.random.default_rng(0)
        for batch in batches:
            state = jax_steps.TrainState.from_model(model, optimizer)
            data = [jax.device_put(_pretraining_batch(rng, batch, seq, preds))
                    for _ in range(4)]
            start = time.perf_counter()
            state, logs = step(state, data[0])
            jax.block_until_ready(logs["loss"])
            compile_s = time.perf_counter() - start
            for k in range(3):
                state, logs = step(state, data[k % 4])
            jax.block_until_ready(logs["loss"])
            start = time.perf_counter()
            for k in range(steps):
                state, logs = step(state, data[k % 4])
            jax.block_until_ready(logs["loss"])
            seconds = time.perf_counter() - start
            rate = batch * steps / seconds
            mfu = rate * train_flops_per_sequence(seq, preds) / (peak * 1e12)
            report("pretrain", batch=batch, seq=seq, predictions=preds, steps=steps,
                   dropout=dropout,
                   seq_per_s=round(rate, 1), mfu_vs_measured_peak=round(mfu, 3),
                   compile_s=round(compile_s, 1), loss=float(logs["loss"]),
                   global_norm=float(logs["global_norm"]))
            del state
    finally:
        keras.config.set_dtype_policy("float32")


def step_parts(batch: int, steps: int, seq: int = 128, preds: int = 20) -> None:
    """Where a pre-training step's time goes: the forward (training mode) alone, forward +
    backward, and the whole step (+ clipping and the update), each compiled on its own."""
    import jax
    import keras

    import modeling
    from modeling.training.backends.jax import steps as jax_steps

    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = modeling.BertPretrainingModel(modeling.BertConfig(**BASE), seq_length=seq)
        optimizer = modeling.create_optimizer(1e-4, 10000, 100)
        optimizer.build(model.trainable_variables)
        state = jax_steps.TrainState.from_model(model, optimizer)
        data = jax.device_put(_pretraining_batch(np.random.default_rng(0), batch, seq, preds))

        def loss(trainable, non_trainable, x):
            out, _ = model.stateless_call(trainable, non_trainable, x, training=True)
            return out["total_loss"]

        forward = jax.jit(loss)
        grads = jax.jit(jax.grad(loss))
        full = jax_steps.make_train_step(model, optimizer, jit=False)
        full = jax.jit(full)

        def timed(fn, *args):
            jax.block_until_ready(fn(*args))
            start = time.perf_counter()
            for _ in range(steps):
                out = fn(*args)
            jax.block_until_ready(out)
            return (time.perf_counter() - start) / steps * 1000

        parts = {"forward_ms": timed(forward, state.trainable, state.non_trainable, data),
                 "forward_backward_ms": timed(grads, state.trainable, state.non_trainable,
                                              data),
                 "step_ms": timed(full, state, data)}
        report("parts", batch=batch, **{k: round(v, 2) for k, v in parts.items()})
    finally:
        keras.config.set_dtype_policy("float32")


def infer(batch: int, steps: int, seq: int = 128) -> None:
    import jax

    import modeling

    model = modeling.BertModel(modeling.BertConfig(**BASE), seq_length=seq, dtype="bfloat16")
    rng = np.random.default_rng(1)
    data = {"input_ids": rng.integers(1000, 30000, size=(batch, seq)).astype(np.int32),
            "input_mask": np.ones((batch, seq), np.int32),
            "segment_ids": np.zeros((batch, seq), np.int32)}
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    @jax.jit
    def forward(t, n, x):
        out, _ = model.stateless_call(t, n, x, training=False)
        return out["sequence_output"], out["pooled_output"]

    data = jax.device_put(data)
    jax.block_until_ready(forward(trainable, non_trainable, data))
    start = time.perf_counter()
    for _ in range(steps):
        out = forward(trainable, non_trainable, data)
    jax.block_until_ready(out)
    report("infer", batch=batch, seq=seq, seq_per_s=round(batch * steps
                                                          / (time.perf_counter() - start), 1))


def hf_peers(batch: int, steps: int, seq: int = 128, preds: int = 20) -> None:
    try:
        import torch
        import transformers
    except ImportError as e:
        report("hf", skipped=str(e))
        return
    config = transformers.BertConfig(**{k: v for k, v in BASE.items()})
    rng = np.random.default_rng(0)
    b = _pretraining_batch(rng, batch, seq, preds)
    labels = np.full((batch, seq), -100, np.int64)
    for row in range(batch):
        labels[row, b["masked_lm_positions"][row]] = b["masked_lm_ids"][row]
    dev = "cuda"
    inputs = dict(input_ids=torch.tensor(b["input_ids"], device=dev),
                  attention_mask=torch.tensor(b["input_mask"], device=dev),
                  token_type_ids=torch.tensor(b["segment_ids"], device=dev),
                  labels=torch.tensor(labels, device=dev),
                  next_sentence_label=torch.tensor(b["next_sentence_labels"][:, 0],
                                                   device=dev, dtype=torch.long))
    for mode in ("eager", "compile"):
        model = transformers.BertForPreTraining(config).to(dev)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        run = torch.compile(model) if mode == "compile" else model

        def one(run=run, model=model, optimizer=optimizer):  # this mode's, bound now
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = run(**inputs).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        start = time.perf_counter()
        for _ in range(3):
            one()
        torch.cuda.synchronize()
        warm = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(steps):
            one()
        torch.cuda.synchronize()
        report("hf", mode=mode, batch=batch, seq_per_s=round(batch * steps
                                                             / (time.perf_counter() - start), 1),
               warmup_s=round(warm, 1), torch=torch.__version__,
               transformers=transformers.__version__)
        del model, optimizer, run, one  # ``one`` holds them too
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export_golden", help="write the golden npz files here (needs TF)")
    parser.add_argument("--golden_root", default=os.path.join("..", "shared", "golden",
                                                              "modeling"))
    parser.add_argument("--golden", help="folder of the exported goldens")
    parser.add_argument("--batches", default="64,256")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--infer_batch", type=int, default=256)
    parser.add_argument("--peers", action="store_true")
    parser.add_argument("--parts_only", action="store_true",
                        help="only time the step's parts (forward, backward, update)")
    parser.add_argument("--peak_n", type=int, default=8192, help="the peak matmul's size")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.export_golden:
        export_golden(args.export_golden, args.golden_root)
        return 0
    import jax
    import keras

    report("env", backend=keras.backend.backend(), keras=keras.__version__,
           jax=jax.__version__, devices=[str(d) for d in jax.devices()],
           tensorflow="tensorflow" in sys.modules)
    try:
        if args.parts_only:
            step_parts(64, args.steps)
            return 0
        if args.golden:
            golden(args.golden)
        peak = matmul_peak(args.peak_n)
        pretrain([int(b) for b in args.batches.split(",")], args.steps, peak)
        pretrain([64], args.steps, peak, dropout=False)  # how much dropout's masks cost
        infer(args.infer_batch, args.steps)
        if args.peers:
            hf_peers(64, args.steps)
    finally:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(RESULTS, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

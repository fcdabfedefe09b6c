"""GLUE metrics in pure numpy, and the metric set of each task.

* ``accuracy(preds, labels)``: fraction equal.
* ``f1(preds, labels, positive=1)``: binary F1 of the positive class (0 when it is never
  predicted nor present).
* ``matthews_corrcoef(preds, labels)``: Matthews correlation, multi-class form (Gorodkin 2004),
  equal to the binary phi coefficient for two classes; 0 when a denominator is 0 (as sklearn).
* ``pearson(x, y)``, ``spearman(x, y)``: correlation coefficients; Spearman is Pearson on
  average ranks (ties share the mean rank); nan when a side is constant.

``task_metrics(task_name, preds, labels, weights=None)`` returns the task's dict: accuracy for
every classification task; ``f1`` and ``acc_and_f1`` too for MRPC and QQP; ``mcc`` for CoLA;
``pearson``, ``spearmanr`` and ``corr`` (their mean) for STS-B. ``weights`` (e.g.
``is_real_example``) drops the 0-weight entries first.

``eval_metrics(task_name, result, regression)`` is what the fine-tuning tools write to
``eval_results.txt``: ``eval_<metric>`` of the task, ``eval_loss`` (mean per-example loss,
``mean_cross_entropy`` or squared error) and ``loss``, from the model's outputs.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np


def _pair(preds, labels):
    p = np.asarray(preds).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    if p.shape != y.shape:
        raise ValueError("predictions and labels differ in length: %d vs %d" % (p.size, y.size))
    return p, y


def accuracy(preds, labels) -> float:
    """The fraction of ``preds`` equal to ``labels`` (NaN for none).

    Args:
        preds: predicted class ids [N].
        labels: true class ids [N].

    Returns:
        A float in [0, 1].

    Raises:
        ValueError: different lengths.
    """
    p, y = _pair(preds, labels)
    if p.size == 0:
        return float("nan")
    return float(np.mean(p == y))


def f1(preds, labels, positive=1) -> float:
    """F1 of the ``positive`` class (0 when it is never predicted nor true).

    Args:
        preds: predicted class ids [N].
        labels: true class ids [N].
        positive: the positive class id.

    Returns:
        A float in [0, 1].
    """
    p, y = _pair(preds, labels)
    tp = float(np.sum((p == positive) & (y == positive)))
    fp = float(np.sum((p == positive) & (y != positive)))
    fn = float(np.sum((p != positive) & (y == positive)))
    denominator = 2 * tp + fp + fn
    return 0.0 if denominator == 0 else 2 * tp / denominator


def matthews_corrcoef(preds, labels) -> float:
    """Matthews correlation (multi-class form, as scikit-learn's; 0 when undefined).

    Args:
        preds: predicted class ids [N].
        labels: true class ids [N].

    Returns:
        A float in [-1, 1].
    """
    p, y = _pair(preds, labels)
    classes, encoded = np.unique(np.concatenate([y, p]), return_inverse=True)
    k = len(classes)
    y_idx, p_idx = encoded[:y.size], encoded[y.size:]
    confusion = np.zeros((k, k), dtype=np.float64)  # [true, predicted]
    np.add.at(confusion, (y_idx, p_idx), 1.0)
    t = confusion.sum(axis=1)  # times each class truly occurred
    q = confusion.sum(axis=0)  # times each class was predicted
    c = np.trace(confusion)
    s = confusion.sum()
    numerator = c * s - np.dot(t, q)
    denominator = np.sqrt(s * s - np.dot(q, q)) * np.sqrt(s * s - np.dot(t, t))
    return 0.0 if denominator == 0 else float(numerator / denominator)


def pearson(x, y) -> float:
    """Pearson correlation of two equal-length vectors.

    Args:
        x: floats [N].
        y: floats [N].

    Returns:
        A float in [-1, 1].
    """
    a, b = _pair(x, y)
    a = a.astype(np.float64) - np.mean(a)
    b = b.astype(np.float64) - np.mean(b)
    denominator = np.sqrt(np.dot(a, a) * np.dot(b, b))
    return float("nan") if denominator == 0 else float(np.dot(a, b) / denominator)


def rankdata(x) -> np.ndarray:
    """Ranks from 1, ties given their average rank (scipy's ``rankdata(method='average')``).

    Args:
        x: values [N].

    Returns:
        float64 ranks [N].
    """
    x = np.asarray(x).reshape(-1)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    # Start index of each run of equal values.
    new_run = np.concatenate([[True], sorted_x[1:] != sorted_x[:-1]])
    run_id = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    ends = np.concatenate([starts[1:], [x.size]])
    average = (starts + ends - 1) / 2.0 + 1.0  # mean of ranks start+1 .. end
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = average[run_id]
    return ranks


def spearman(x, y) -> float:
    """Spearman correlation: ``pearson`` of the ``rankdata`` ranks.

    Args:
        x: floats [N].
        y: floats [N].

    Returns:
        A float in [-1, 1].
    """
    a, b = _pair(x, y)
    return pearson(rankdata(a), rankdata(b))


# Tasks by metric family (canonical ``--task_name`` keys of data.glue.processors).
F1_TASKS = ("mrpc", "qqp")
MCC_TASKS = ("cola",)
REGRESSION_TASKS = ("sts-b",)


def task_metrics(task_name: str, preds, labels, weights: Optional[np.ndarray] = None
                 ) -> Dict[str, float]:
    """The metric dict of ``task_name`` (see the module docstring).

    ``preds``/``labels``: class ids (floats for STS-B) [N]; ``weights`` [N] or None.

    Args:
        task_name: a ``PROCESSORS`` key (the metric family).
        preds: predictions [N].
        labels: true labels [N].
        weights: per-example weights [N] (0 drops padding), or None.

    Returns:
        Metric name -> value: ``accuracy``, plus ``f1``/``acc_and_f1`` (MRPC, QQP) or ``mcc``
    (CoLA); STS-B: ``pearson``, ``spearmanr``, ``corr``.
    """
    p, y = _pair(preds, labels)
    if weights is not None:
        keep = np.asarray(weights).reshape(-1) > 0
        p, y = p[keep], y[keep]
    if task_name in REGRESSION_TASKS:
        r, rho = pearson(p, y), spearman(p, y)
        return {"pearson": r, "spearmanr": rho, "corr": (r + rho) / 2.0}
    out = {"accuracy": accuracy(p, y)}
    if task_name in F1_TASKS:
        out["f1"] = f1(p, y)
        out["acc_and_f1"] = (out["accuracy"] + out["f1"]) / 2.0
    if task_name in MCC_TASKS:
        out["mcc"] = matthews_corrcoef(p, y)
    return out


def mean_cross_entropy(logits, labels) -> float:
    """Mean softmax cross-entropy of ``logits`` [N, K] against class ids ``labels`` [N]
    (float64, max-shifted: no overflow for large logits).

    Args:
        logits: float [N, K].
        labels: int [N].

    Returns:
        A float.
    """
    logits = np.asarray(logits, np.float64)
    labels = np.asarray(labels).reshape(-1).astype(np.int64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    return float(-np.mean(log_probs[np.arange(len(labels)), labels]))


def eval_metrics(task_name: str, result: Dict[str, np.ndarray],
                 regression: bool = False) -> Dict[str, float]:
    """``eval_*`` metrics of the task, ``eval_loss`` (mean per-example loss) and ``loss``.

    ``result``: ``label_ids`` [N] and the model's ``logits`` [N, K] (and ``probabilities``, if
    there, for the predicted class) in classification, or
    ``predictions`` [N] (regression), real examples only, in any one order.

    Args:
        task_name: the task (``task_metrics``).
        result: the model outputs and labels (above).
        regression: the task is a regression (STS-B).

    Returns:
        ``eval_<metric>`` -> value, ``eval_loss`` and ``loss``.
    """
    labels = np.asarray(result["label_ids"])
    if regression:
        preds = np.asarray(result["predictions"]).reshape(-1)
        loss = float(np.mean((preds - labels) ** 2))
    else:
        # The class of the highest probability, as the submission file says.
        preds = np.argmax(result.get("probabilities", result["logits"]), axis=-1)
        loss = mean_cross_entropy(result["logits"], labels)
    metrics = {"eval_" + k: v for k, v in task_metrics(task_name, preds, labels).items()}
    metrics["eval_loss"] = loss
    metrics["loss"] = loss
    return metrics

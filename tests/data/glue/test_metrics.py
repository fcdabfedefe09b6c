"""data/glue/metrics.py against values computed by hand (worked out in the comments)."""

import math

import numpy as np
import pytest

from data.glue import metrics as gm


def test_accuracy_and_f1_by_hand():
    preds = [1, 1, 0, 1, 0, 0]
    labels = [1, 0, 0, 1, 1, 0]
    # agree on 0, 2, 3, 5 -> 4/6; tp=2 (0, 3), fp=1 (1), fn=1 (4) -> F1 = 4/(4+1+1)
    assert gm.accuracy(preds, labels) == pytest.approx(4 / 6)
    assert gm.f1(preds, labels) == pytest.approx(4 / 6)
    assert gm.f1([0, 0], [0, 0]) == 0.0


def test_matthews_binary_by_hand():
    preds = [1, 1, 0, 1, 0, 0, 1]
    labels = [1, 0, 0, 1, 1, 0, 1]
    # tp=3, tn=2, fp=1, fn=1: (3*2 - 1*1) / sqrt(4*4*3*3) = 5/12
    assert gm.matthews_corrcoef(preds, labels) == pytest.approx(5 / 12)
    assert gm.matthews_corrcoef([1, 1, 1], [0, 1, 1]) == 0.0  # a constant side: 0
    assert gm.matthews_corrcoef([0, 1, 0], [0, 1, 0]) == pytest.approx(1.0)
    assert gm.matthews_corrcoef([1, 0], [0, 1]) == pytest.approx(-1.0)


def test_matthews_multiclass_by_hand():
    preds = [0, 1, 2, 2, 1, 0]
    labels = [0, 1, 2, 1, 1, 2]
    # confusion[true][pred]: t=(1,3,2), p=(2,2,2), c=4, s=6
    # (4*6 - (2+6+4)) / sqrt((36-12)*(36-(1+9+4))) = 12 / sqrt(24*22)
    assert gm.matthews_corrcoef(preds, labels) == pytest.approx(12 / math.sqrt(24 * 22))


def test_pearson_and_spearman_by_hand():
    x = [1.0, 2.0, 3.0, 4.0]
    y = [2.0, 4.0, 5.0, 9.0]
    # deviations x: -1.5 -.5 .5 1.5; y mean 5: -3 -1 0 4 -> sum xy = 4.5+.5+0+6 = 11
    # sum x^2 = 5, sum y^2 = 26 -> r = 11 / sqrt(130)
    assert gm.pearson(x, y) == pytest.approx(11 / math.sqrt(130))
    assert gm.spearman(x, y) == pytest.approx(1.0)
    assert gm.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # ties: ranks of [10, 20, 20, 30] are [1, 2.5, 2.5, 4]
    assert list(gm.rankdata([10, 20, 20, 30])) == [1.0, 2.5, 2.5, 4.0]
    # spearman([1,2,3,4],[1,3,3,2]) = pearson([1,2,3,4],[1,3.5,3.5,2])
    # x devs -1.5 -.5 .5 1.5, y rank devs -1.5 1 1 -.5 -> sxy = 2.25-.5+.5-.75 = 1.5;
    # sxx = 5; syy = 2.25+1+1+.25 = 4.5
    assert gm.spearman([1, 2, 3, 4], [1, 3, 3, 2]) == pytest.approx(1.5 / math.sqrt(5 * 4.5))
    assert math.isnan(gm.pearson([1, 1, 1], [1, 2, 3]))


def test_task_metrics_per_task_and_weights():
    preds = np.array([1, 0, 1, 1])
    labels = np.array([1, 0, 0, 1])
    weights = np.array([1, 1, 1, 0])  # the last one is a padding example
    mrpc = gm.task_metrics("mrpc", preds, labels, weights)
    # kept: p=[1,0,1], y=[1,0,0]: acc 2/3, tp=1 fp=1 fn=0 -> F1 2/3
    assert mrpc == pytest.approx({"accuracy": 2 / 3, "f1": 2 / 3, "acc_and_f1": 2 / 3})
    assert set(gm.task_metrics("cola", preds, labels)) == {"accuracy", "mcc"}
    assert set(gm.task_metrics("rte", preds, labels)) == {"accuracy"}
    sts = gm.task_metrics("sts-b", [1.0, 2.0, 3.0], [1.5, 2.5, 2.0])
    assert set(sts) == {"pearson", "spearmanr", "corr"}
    assert sts["corr"] == pytest.approx((sts["pearson"] + sts["spearmanr"]) / 2)
    with pytest.raises(ValueError, match="differ in length"):
        gm.accuracy([1, 2], [1])


def test_eval_metrics_classification_and_regression():
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    result = {"logits": logits, "probabilities": probs, "label_ids": np.array([0, 1, 1])}
    m = gm.eval_metrics("mrpc", result, regression=False)
    assert m["eval_accuracy"] == pytest.approx(2 / 3) and m["eval_f1"] == pytest.approx(2 / 3)
    expected_loss = np.mean([np.log(1 + np.exp(-2.0)), np.log(1 + np.exp(-1.0)),
                             np.log(1 + np.exp(1.0))])
    assert m["eval_loss"] == pytest.approx(expected_loss) and m["loss"] == m["eval_loss"]
    reg = gm.eval_metrics("sts-b", {"predictions": np.array([1.0, 2.0, 4.0]),
                                                "label_ids": np.array([1.5, 2.0, 3.0])}, True)
    assert set(reg) == {"eval_pearson", "eval_spearmanr", "eval_corr", "eval_loss", "loss"}
    assert reg["eval_spearmanr"] == pytest.approx(1.0)
    assert reg["eval_loss"] == pytest.approx((0.25 + 0 + 1) / 3)

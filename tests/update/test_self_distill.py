"""Self-distillation objectives (opsd, sdar, rlsd) against hand-derived numbers.

Convention: one sequence per row, V = 2. The student's distributions are log([p, 1 - p]) with grad;
the teacher's are detached. logprobs are the student's logprobs of the sampled token (index 0).
"""

import math

import pytest
import torch
from torch.testing import assert_close

from coevo.config import ObjectiveConfig, TeacherConfig
from coevo.update.objectives import (
    OPSD,
    RLSD,
    SDAR,
    PolicyBatch,
    build_objective,
    divergence_per_token,
)

F64 = torch.float64
LN2 = math.log(2.0)


def batch_of(student, teacher, advantages=(0.0,), passed=None, teacher_leaf=False):
    """student/teacher: [B][T] probabilities of token 0 (token 1 gets the rest); token 0 was sampled."""
    s = torch.tensor(student, dtype=F64)
    t = torch.tensor(teacher, dtype=F64)
    dist = torch.stack([s, 1 - s], dim=-1).log().requires_grad_(True)  # [B, T, 2]
    teacher_dist = torch.stack([t, 1 - t], dim=-1).log()  # [B, T, 2]
    if teacher_leaf:
        teacher_dist.requires_grad_(True)
    logprobs = dist[..., 0]  # [B, T] with grad through dist
    zeros = torch.zeros_like(s)
    return PolicyBatch(
        logprobs=logprobs,
        old_logprobs=logprobs.detach(),
        sampling_logprobs=logprobs.detach(),
        advantages=torch.tensor(advantages, dtype=F64),
        mask=torch.ones_like(zeros),
        distributions=dist,
        teacher_distributions=teacher_dist,
        teacher_logprobs=teacher_dist[..., 0],
        passed=None if passed is None else torch.tensor(passed),
    )


def cfg(name, grpo_weight=0.0, **teacher):
    return ObjectiveConfig(name=name, grpo_weight=grpo_weight, teacher=TeacherConfig(**teacher))


def test_reverse_and_forward_kl_by_hand():
    batch = batch_of([[0.5]], [[0.25]])
    # reverse: 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln 2 + 0.5 ln(2/3)
    assert_close(divergence_per_token(batch, "reverse"), torch.tensor([[0.5 * LN2 + 0.5 * math.log(2 / 3)]], dtype=F64))
    # forward: 0.25 ln(0.25/0.5) + 0.75 ln(0.75/0.5)
    assert_close(
        divergence_per_token(batch, "forward"), torch.tensor([[0.25 * math.log(0.5) + 0.75 * math.log(1.5)]], dtype=F64)
    )
    same = batch_of([[0.3, 0.8]], [[0.3, 0.8]])
    assert_close(divergence_per_token(same, "reverse"), torch.zeros(1, 2, dtype=F64))


def test_opsd_pure_distillation_is_the_token_mean_divergence_and_its_gradient():
    batch = batch_of([[0.5, 0.5]], [[0.25, 0.5]])
    loss, stats = OPSD(cfg("opsd")).loss(batch)
    expected = (0.5 * LN2 + 0.5 * math.log(2 / 3) + 0.0) / 2
    assert_close(loss, torch.tensor(expected, dtype=F64))
    loss.backward()
    # d/dlog p_s(0) of sum_v p_s(v)(log p_s(v) - log p_t(v)) at fixed normalisation is
    # p_s(0)(log p_s(0) - log p_t(0) + 1);
    # with token-mean over 2 tokens and the logit-free parametrisation used here (both entries free):
    grad = batch.distributions.grad  # [1, 2, 2]
    p_s, p_t = 0.5, 0.25
    assert grad[0, 0, 0].item() == pytest.approx(p_s * (math.log(p_s / p_t) + 1) / 2)
    assert grad[0, 0, 1].item() == pytest.approx((1 - p_s) * (math.log((1 - p_s) / (1 - p_t)) + 1) / 2)
    assert stats["policy/distill_token_frac"] == 1.0


def test_teacher_gets_no_gradient():
    batch = batch_of([[0.5, 0.4]], [[0.25, 0.5]], advantages=(1.0,), passed=[True], teacher_leaf=True)
    for objective in (OPSD(cfg("opsd", grpo_weight=1.0)), SDAR(cfg("sdar")), RLSD(cfg("rlsd"))):
        loss, _ = objective.loss(batch)
        loss.backward()
        assert batch.teacher_distributions.grad is None
        assert batch.distributions.grad is not None
        batch.distributions.grad = None


def test_apply_to_correct_only_distils_passed_sequences():
    batch = batch_of([[0.5], [0.5]], [[0.25], [0.9]], advantages=(0.0, 0.0), passed=[True, False])
    loss, stats = OPSD(cfg("opsd", apply_to="correct")).loss(batch)
    assert_close(loss, torch.tensor(0.5 * LN2 + 0.5 * math.log(2 / 3), dtype=F64))  # row 0 only
    assert stats["policy/distill_token_frac"] == 0.5
    wrong, _ = OPSD(cfg("opsd", apply_to="incorrect")).loss(batch)
    assert_close(wrong, torch.tensor(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1), dtype=F64))


def test_opsd_mixes_grpo_by_weight():
    batch = batch_of([[0.5]], [[0.5]], advantages=(2.0,))
    # teacher == student: D = 0; GRPO at ratio 1 with A = 2: pg = -2 per token
    loss, _ = OPSD(cfg("opsd", grpo_weight=0.5)).loss(batch)
    assert_close(loss, torch.tensor(-1.0, dtype=F64))


def test_sdar_gate_is_a_sigmoid_of_the_teacher_gap():
    # gaps: ln(0.5/0.25) = ln 2 -> gate 2/3; ln(0.25/0.5) = -ln 2 -> gate 1/3
    batch = batch_of([[0.25, 0.5]], [[0.5, 0.25]], advantages=(0.0,))
    loss, stats = SDAR(cfg("sdar")).loss(batch)
    d0 = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    d1 = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert_close(loss, torch.tensor((2 / 3 * d0 + 1 / 3 * d1) / 2, dtype=F64))
    assert stats["policy/gate_mean"] == pytest.approx(0.5)
    hot, _ = SDAR(cfg("sdar", gate_temperature=1e-6)).loss(batch)  # a hard gate keeps the endorsed token only
    assert_close(hot, torch.tensor(d0 / 2, dtype=F64))


def test_rlsd_magnitudes_follow_the_teacher_and_keep_the_direction():
    # gaps ln 2 and -ln 2; A = +1: raw [2, 0.5] -> mean 1.25 -> [1.6, 0.4]; A = -1: raw [0.5, 2] -> [0.4, 1.6]
    batch = batch_of([[0.25, 0.5], [0.25, 0.5]], [[0.5, 0.25], [0.5, 0.25]], advantages=(1.0, -1.0))
    weights = RLSD(cfg("rlsd")).magnitudes(batch)
    assert_close(weights, torch.tensor([[1.6, 0.4], [0.4, 1.6]], dtype=F64))
    loss, _ = RLSD(cfg("rlsd")).loss(batch)
    loss.backward()
    # at ratio 1 (inside the clip, tis 1) d pg / d logprob = -A * w, token-mean over 4 tokens
    expected = -torch.tensor([[1.0], [-1.0]], dtype=F64) * torch.tensor([[1.6, 0.4], [0.4, 1.6]], dtype=F64) / 4
    assert_close(batch.distributions.grad[..., 0], expected)


def test_rlsd_cap_and_correct_only():
    batch = batch_of([[0.1, 0.5]], [[0.8, 0.5]], advantages=(1.0,), passed=[False])
    # gap ln 8 -> raw 8 capped to 4; gap 0 -> 1; mean 2.5 -> [1.6, 0.4]
    assert_close(RLSD(cfg("rlsd", magnitude_cap=4.0)).magnitudes(batch), torch.tensor([[1.6, 0.4]], dtype=F64))
    assert_close(RLSD(cfg("rlsd", apply_to="correct")).magnitudes(batch), torch.ones(1, 2, dtype=F64))


def test_registry_flags():
    for name in ("opsd", "sdar", "rlsd"):
        objective = build_objective(ObjectiveConfig(name=name))
        assert objective.needs_teacher and objective.token_signal
    assert not build_objective(ObjectiveConfig(name="grpo")).needs_teacher


def test_missing_teacher_view_is_an_error():
    batch = batch_of([[0.5]], [[0.5]])
    batch.teacher_distributions = None
    with pytest.raises(ValueError, match="teacher_distributions"):
        OPSD(cfg("opsd")).loss(batch)

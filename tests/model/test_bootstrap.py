import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from coevo.model.checkpoint import load_policy, policy_version
from coevo.model.tokenizer import build_char_tokenizer
from coevo.rollout.prompting import render_prompt


def test_char_tokenizer_round_trips_and_adds_bos():
    tok = build_char_tokenizer()
    text = render_prompt("12-34=", ["7*8=56"])
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert len(ids) == len(text) + 1  # one token per character
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_bootstrap_checkpoint_loads_with_transformers(tiny_policy_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(tiny_policy_dir, local_files_only=True)
    assert model.config.model_type == "llama"
    assert model.config.vocab_size == len(tok)
    ids = torch.tensor([tok("3+4=")["input_ids"]])
    assert model(ids).logits.shape == (1, ids.shape[1], len(tok))
    meta = json.loads((tiny_policy_dir / "coevo.json").read_text())
    assert meta["source"] == "tiny-bootstrap" and meta["bootstrap"]["steps"] == 30
    assert policy_version(tiny_policy_dir) == meta["weights_sha256"]


def test_bootstrap_learns_from_demonstrations(tiny_policy_dir):
    """30 supervised steps must lower the loss well below a random model's ln(V) per token."""
    meta = json.loads((tiny_policy_dir / "coevo.json").read_text())
    vocab = len(load_policy(tiny_policy_dir, "cpu").tokenizer)
    assert meta["bootstrap"]["final_loss"] < 0.6 * torch.log(torch.tensor(float(vocab))).item()


def test_any_local_checkpoint_is_accepted_instead(tmp_path, tiny_policy_dir):
    from coevo.model.bootstrap import bootstrap_policy
    from tests.conftest import tiny_config

    cfg = tiny_config(tmp_path, policy={"checkpoint": str(tiny_policy_dir)})
    policy, meta = bootstrap_policy(cfg, train=None)
    assert meta["source"] == str(tiny_policy_dir)
    original = load_policy(tiny_policy_dir, "cpu").model.state_dict()
    for name, tensor in policy.model.state_dict().items():
        torch.testing.assert_close(tensor, original[name])


def test_demonstrations_come_from_the_easy_families_only(tmp_path):
    import numpy as np

    from coevo.model.bootstrap import demonstration_sequences
    from coevo.prepare import build_splits
    from tests.conftest import tiny_config

    cfg = tiny_config(tmp_path, bootstrap={"recall_prob": 0.0})  # recall exercises: the next test
    train, _ = build_splits(cfg)
    pool = train[train["family"].isin(cfg.problems.bootstrap_families)]
    tok = build_char_tokenizer()
    sequences, masks = demonstration_sequences(pool, cfg, np.random.default_rng(0), tok)
    texts = [tok.decode(seq, skip_special_tokens=True) for seq in sequences]
    assert all("*" not in text for text in texts)  # mul is never demonstrated
    for seq, mask in zip(sequences, masks):
        assert seq[-1] == tok.eos_token_id and mask[-1] == 1.0  # the final answer ends in <eos>, trained
        trained = tok.decode([t for t, m in zip(seq, mask) if m and t != tok.eos_token_id])
        assert set(trained) <= set("-0123456789")  # only answers carry loss, never questions


def test_recall_exercises_look_up_a_random_answer_in_the_context(tmp_path):
    import numpy as np

    from coevo.model.bootstrap import demonstration_sequences
    from coevo.prepare import build_splits
    from tests.conftest import tiny_config

    cfg = tiny_config(tmp_path, bootstrap={"recall_prob": 1.0, "context_prob": 0.5})
    train, _ = build_splits(cfg)
    tok = build_char_tokenizer()
    sequences, masks = demonstration_sequences(train[train["family"] == "add"], cfg, np.random.default_rng(0), tok)
    answers = set()
    for seq, mask in zip(sequences, masks):
        lines = tok.decode(seq, skip_special_tokens=True).split("\n")
        question, answer = lines[-1].split("=")
        assert question[1] in "+-*" and f"{question}={answer}" in lines[:-1]  # the lookup stands in the context
        others = [line for line in lines[:-1] if line != f"{question}={answer}"]
        assert len(others) == len(lines) - 2 and all(
            "+" in line for line in others
        )  # the other lines: the family's facts
        # scored: the other context answers and the final answer + <eos>; never the looked-up answer
        assert sum(mask) == sum(len(line.split("=")[1]) for line in others) + len(answer) + 1
        answers.add(answer)
    assert len(answers) > len(sequences) // 4  # random answers: nothing to memorise


# ---- a user checkpoint's weights are copied into checkpoint 0 (cloned where possible), never shared ----


def _user_copy(tiny_policy_dir, directory):
    import shutil

    shutil.copytree(tiny_policy_dir, directory)
    return directory


def test_user_weights_are_copied_and_never_written_through(tmp_path, tiny_policy_dir):
    """Checkpoint 0's weights are a copy of the user's file (another inode, one link; a copy-on-write
    clone where the filesystem has reflinks), its sha256 recorded; a 2-iteration run on top leaves the
    user's file byte-identical, and an in-place overwrite of the user's file leaves checkpoint 0 intact."""
    import os

    from coevo.driver import train
    from coevo.io import hash_file
    from coevo.model.checkpoint import WEIGHTS, read_meta
    from coevo.store.lineage import verify_lineage
    from tests.conftest import tiny_config

    user = _user_copy(tiny_policy_dir, tmp_path / "user")
    before = hash_file(user / WEIGHTS)
    cfg = tiny_config(tmp_path, policy={"checkpoint": str(user)}, run={"iterations": 2})
    train(cfg)
    boot = cfg.bootstrap_dir / WEIGHTS
    assert os.stat(boot).st_ino != os.stat(user / WEIGHTS).st_ino and os.stat(boot).st_nlink == 1
    assert read_meta(cfg.bootstrap_dir)["files"][WEIGHTS] == read_meta(cfg.bootstrap_dir)["weights_sha256"] == before
    assert hash_file(user / WEIGHTS) == before  # loading, updating and saving never wrote into the user's file
    loaded = load_policy(cfg.bootstrap_dir, "cpu").model.state_dict()
    for name, tensor in load_policy(user, "cpu").model.state_dict().items():
        assert torch.equal(tensor, loaded[name]), name
    assert verify_lineage(cfg.bootstrap_dir) == []
    with (user / WEIGHTS).open("r+b") as fh:  # in place: the user's inode only
        fh.seek(-1, os.SEEK_END)
        fh.write(b"\x01")
    assert hash_file(boot) == before and verify_lineage(cfg.bootstrap_dir) == []


def test_user_weights_of_another_dtype_are_saved_converted(tmp_path, tiny_policy_dir):
    import os

    from coevo.model.bootstrap import bootstrap_policy
    from coevo.model.checkpoint import WEIGHTS
    from tests.conftest import tiny_config

    user = _user_copy(tiny_policy_dir, tmp_path / "user")
    cfg = tiny_config(tmp_path / "bf16", policy={"checkpoint": str(user), "dtype": "bfloat16"})
    bootstrap_policy(cfg, train=None)  # the file holds float32: saved converted, not copied as is
    assert os.stat(cfg.bootstrap_dir / WEIGHTS).st_size < os.stat(user / WEIGHTS).st_size
    assert load_policy(cfg.bootstrap_dir, "cpu", "bfloat16").model.dtype == torch.bfloat16

"""Several co-evolvers in one run (`coevolvers:`): params validation, roles, the saved list, a run.

The list's members are real co-evolvers (a curriculum and a skill bank); the run goes through the
plain driver with the tiny policy and is audited with the real lineage check.
"""

from __future__ import annotations

import json

import pytest

from coevo.coevolvers.base import CoevolverDirError, read_manifest
from coevo.coevolvers.composite import CoevolverRoleError, CoEvolverList, build_coevolvers, load_coevolvers
from coevo.config import ConfigError
from coevo.stages import prepare_stage
from coevo.store.lineage import read_record, verify_lineage

from ..conftest import tiny_config

PAIR = [{"kind": "curriculum"}, {"kind": "skill_bank"}]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"coevolvers": [{"kind": "skill_bank"}]}, r"coevolvers: list at least two"),
        ({"coevolvers": [{"kind": "curriculum"}, {"kind": "none"}]}, r"coevolvers\[1\]\.kind: 'none' cannot be combined"),
        ({"coevolvers": [{"kind": "skill_bank"}, {"kind": "curriculum"}, {"kind": "skill_bank"}]}, r"coevolvers\[2\]\.kind: 'skill_bank' is already coevolvers\[0\]"),
        ({"coevolvers": PAIR, "coevolver": {"kind": "memory"}}, r"set either `coevolver` .* or `coevolvers`"),
        ({"coevolvers": [{"kind": "curriculum"}, {"kind": "skil_bank"}]}, r"coevolvers\.1\.kind"),
    ],
)
def test_bad_coevolver_lists_are_clear_params_errors(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(tmp_path, **overrides)


def test_the_single_coevolver_params_keep_working(tmp_path):
    cfg = tiny_config(tmp_path, coevolver={"kind": "memory"})
    assert cfg.coevolvers is None and [entry.kind for entry in cfg.coevolver_list] == ["memory"]
    assert build_coevolvers(cfg).kind == "memory"  # not wrapped: its artifacts and hashes are as before


def test_two_members_of_one_role_stop_the_run_before_anything_is_written(tmp_path):
    cfg = tiny_config(tmp_path, coevolvers=[{"kind": "skill_bank"}, {"kind": "memory"}])
    with pytest.raises(CoevolverRoleError, match=r"coevolvers\[0\] \(skill_bank\) and coevolvers\[1\] \(memory\) both play the 'context' role"):
        prepare_stage(cfg)
    assert not cfg.problems.data_dir.exists()


def test_a_saved_list_round_trips_and_names_a_tampered_member_file(tmp_path):
    cfg = tiny_config(tmp_path, coevolvers=PAIR)
    first = build_coevolvers(cfg)
    assert isinstance(first, CoEvolverList) and first.roles == {"problems", "context"}
    content_hash = first.save(tmp_path / "v0")
    manifest = read_manifest(tmp_path / "v0")
    assert manifest["kind"] == "list" and [m["kind"] for m in manifest["members"]] == ["curriculum", "skill_bank"]
    assert all(name.split("/")[0] in {"0-curriculum", "1-skill_bank"} for name in manifest["files"])
    assert load_coevolvers(tmp_path / "v0", cfg).save(tmp_path / "v1") == content_hash  # load + save is the identity

    member_file = next(p for p in sorted((tmp_path / "v0" / "1-skill_bank").iterdir()) if p.name != "manifest.json")
    member_file.write_bytes(member_file.read_bytes() + b" ")
    with pytest.raises(CoevolverDirError, match=rf"{member_file}: content does not match"):
        load_coevolvers(tmp_path / "v0", cfg)
    swapped = tiny_config(tmp_path, coevolvers=list(reversed(PAIR)))
    with pytest.raises(CoevolverDirError, match=r"holds co-evolvers \['curriculum', 'skill_bank'\] but coevolvers lists \['skill_bank', 'curriculum'\]"):
        load_coevolvers(tmp_path / "v1", swapped)


def test_a_run_with_two_coevolvers_records_both_versions_in_the_lineage(tmp_path):
    from coevo.driver import train

    cfg = tiny_config(tmp_path, coevolvers=PAIR)
    summary = train(cfg)
    layout_root = cfg.run.out_dir
    record = read_record(layout_root / "checkpoints" / "iter_0002")
    members = record["coevolver"]["members"]
    assert [m["kind"] for m in members] == ["curriculum", "skill_bank"]
    saved = read_manifest(layout_root / record["coevolver"]["path"])["members"]
    assert [m["content_hash"] for m in members] == [m["content_hash"] for m in saved]
    assert verify_lineage(layout_root / "checkpoints" / "iter_0002") == []
    report = json.loads((layout_root / "reports" / "iter_0002.json").read_text())
    assert set(report["members"]) == {"0-curriculum", "1-skill_bank"}
    assert summary["final_eval"]["iteration"] == 2

"""coevo/report.py: what the CLI prints about finished work reads as sentences and tables, never a repr."""

from rich.console import Console

from coevo.records import Artifact, Bootstrapped
from coevo.report import bootstrap_sentence, first_eval_sentence, splits_table


def test_a_time_budgeted_bootstrap_says_what_stopped_it():
    boot = Bootstrapped(
        Artifact("runs/x/bootstrap", "0" * 64),
        Artifact("runs/x/coevolver/iter_0000", "0" * 64),
        {
            "kind": "arithmetic",
            "steps": 42,
            "seconds": 600.2,
            "final_loss": float("nan"),
            "parameters": 1234567,
            "demonstrations": 672,
            "stopped_by": "time_budget",
        },
    )
    text = bootstrap_sentence(boot)
    assert "42 steps (stopped by bootstrap.time_budget_s) in 600 s, 1,234,567 parameters" in text
    assert "nan" not in text and "{" not in text


def test_first_eval_and_splits_table(tmp_path):
    line = first_eval_sentence(3, "runs/x/checkpoints/iter_0003", {"eval/acc": 0.25, "val/acc": 0.5})
    assert (
        line
        == "[bold]checkpoint 3[/] (iteration 3, runs/x/checkpoints/iter_0003): held-out eval/acc 0.250, val/acc 0.500"
    )
    console = Console(record=True, width=200)
    console.print(splits_table("arithmetic", tmp_path))  # no split written yet: the header alone
    assert "problems from arithmetic" in console.export_text()

"""The measured numbers of the prose are the committed records' (research/figures.py)."""

from pathlib import Path

from nano_respo.sft import CONVERGED_SHARE

ROOT = Path(__file__).resolve().parents[2]
from research import figures, gate1, gate2, warm_start_stop  # noqa: E402


def test_every_tagged_figure_in_the_prose_equals_what_the_records_give():
    assert figures.check() == []


def test_the_figures_the_course_reads_are_the_records_own():
    assert figures.stale_values() == []


def test_a_figure_that_drifted_from_its_records_or_names_nothing_is_reported(tmp_path, monkeypatch):
    name = "llm_low_w_share_selected"
    page = tmp_path / "page.md"
    page.write_text(f"a <!-- fig:{name} -->{figures.value(name)}<!-- /fig --> b\n"
                    f"c <!-- fig:{name} -->0.2-1.6%<!-- /fig --> d\n<!-- fig:no_such -->1<!-- /fig -->\n")
    monkeypatch.setattr(figures, "ROOT", tmp_path)
    problems = figures.check(["page.md"])
    assert len(problems) == 2
    assert "page.md:2: fig:llm_low_w_share_selected reads '0.2-1.6%'" in problems[0]
    assert "no_such is no figure" in problems[1]


def test_the_prose_tags_its_numbers():
    """Each page that states measured results cites at least a few figures by name."""
    for page, least in (("README.md", 10), ("research/README.md", 20)):
        assert len(figures.TAG.findall((ROOT / page).read_text())) >= least, page


def test_every_table_of_gates_md_is_what_the_command_above_it_prints(monkeypatch):
    """research/results/gates.md copies its tables from `gateN.py --summarise`: they must still match."""
    import re

    monkeypatch.chdir(ROOT)
    scripts = {"gate1": gate1, "gate2": gate2}
    text = (ROOT / "research" / "results" / "gates.md").read_text()
    found = re.findall(r"```bash\npython -m research\.(gate[12]) --summarise (\S+)\n```\n\n((?:\|.*\n)+)", text)
    assert len(found) >= 5, "gates.md: each table follows the --summarise command that prints it"
    for script, folder, table in found:
        assert scripts[script].summary(folder) == table.rstrip("\n"), f"gates.md: the table of {folder} is stale"


def test_the_warm_start_result_is_what_its_summarise_prints(monkeypatch):
    """research/WARMSTART.md's result section copies `warm_start_stop.py --summarise`: table and verdict."""
    monkeypatch.chdir(ROOT)
    script = warm_start_stop
    text = (ROOT / "research" / "WARMSTART.md").read_text()
    for candidate in CONVERGED_SHARE:
        command = (f"python -m research.warm_start_stop --summarise research/results/warm-start-stop "
                   f"--candidate {candidate}\n```\n\n")
        assert command in text, f"WARMSTART.md: {candidate}'s result follows the --summarise command that prints it"
        printed = text.split(command)[1].split("\n\nBy the rule")[0]
        assert printed == script.summary("research/results/warm-start-stop", script.WarmStopConfig(candidate=candidate))

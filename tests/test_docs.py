"""The docs against the project: generated tables equal their result files, every figure a page
states is held by a result file (the front pages quote none outside a table), every
`tune-lowmem` command and flag shown exists, every link resolves."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tune_lowmem.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted(ROOT.glob("docs/*.md"))]
FRONT = [ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
GENERATED = re.compile(r"<!-- results:[\w:-]+ -->\n.*?<!-- /results -->", re.DOTALL)
# a measured figure: a decimal number with a unit of memory, time or share, or a range of two
FIGURE = re.compile(
    r"\b(?:(?P<low>\d+\.\d+)-)?(?P<value>\d+\.\d+) ?(?:MB|GB|MiB|GiB|%|s|ms|x)(?![\w/])"
)
# an integer claim: a count of what a benchmark ran or found (epochs, seeds, trials, ...)
INTEGER = re.compile(
    r"(?<![\d.,])(?P<value>\d{1,3}(?:,\d{3})+|\d+) (?:epochs?|seeds?|trials?|updates?|images?|points?"
    r"|configurations?|steps?|runs?|rungs?|samples?)\b"
)
# what follows a figure that is not a measurement (the paper's, a constant, a setting)
NOT_MEASURED = re.compile(r"<!-- not measured: [^>]+ -->")
# how a page names a benchmark whose results it quotes: a region, its result file or its script
NAMED = re.compile(r"<!-- results:(\w+)|results/(\w+)\.json|\b(\w+)\.py\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)  # fenced blocks and inline code
COMMAND = re.compile(r"tune-lowmem (\w+)((?: +(?:[^\s`#|]+))*)")


def render_docs():
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "benchmarks/render_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_generated_tables_equal_their_result_files(page):
    text = page.read_text()
    assert render_docs().render(text) == text, "run: .venv/bin/python benchmarks/render_docs.py"


def test_a_changed_result_is_a_stale_table(tmp_path, monkeypatch):
    docs = render_docs()
    result = (docs.RESULTS / "profiler_accuracy.json").read_text()
    page = "<!-- results:profiler_accuracy -->\n<!-- /results -->\n"
    fresh = docs.render(page)
    assert "| a step's total, tensor storage (allocator) |" in fresh
    (tmp_path / "profiler_accuracy.json").write_text(result.replace('"median": ', '"median": 1'))
    monkeypatch.setattr(docs, "RESULTS", tmp_path)
    assert docs.render(fresh) != fresh


def replay_block(medians: dict[str, float], held_out: bool) -> dict:
    """A block of a replay summary whose methods spent `medians` compute-seconds (three seeds,
    the median in the middle) to every target; the first method the baseline."""
    sweep = {cost: {} for cost in ("compute_to", "elapsed_to", "epochs_to")}
    rows = []
    for method, median in medians.items():
        sweeps = []
        for seed, value in enumerate([median - 1, median, median + 1]):
            costs = {cost: {t: value for t in ("0.90", "0.95", "0.99")} for cost in sweep}
            sweeps.append({"seed": seed, **costs})
        settings = {"sampler": method, "sampler_options": {}, "workers": 4}
        rows.append({"method": method, "settings": settings, "sweeps": sweeps})
    return {"held_out": held_out, "rows": rows}


def replay_summary(first: dict[str, float], held: dict[str, float]) -> dict:
    floors = {t: {"compute": 10.0, "elapsed": 5.0} for t in ("0.90", "0.95", "0.99")}
    blind = {t: {"compute": [20.0, 30.0, 40.0], "elapsed": [9.0, 9.0, 9.0]} for t in floors}
    about = {"points": 8, "epochs": 3, "one_point_share": 0.5, "fewest_seconds": floors}
    about["blind_start_seconds"] = {"workers": 4, "draws": 500, "floors": blind}
    blocks = {"0-2": replay_block(first, False), "1000-1002": replay_block(held, True)}
    return {"clock": "seconds", "table": about, "targets": [0.9, 0.95, 0.99], "blocks": blocks}


def test_the_replay_tables_say_where_seed_blocks_agree():
    """A method ahead of the baseline on both blocks is stated so; one ahead on one block only
    is not; the held-out block's least compute is named."""
    summary = replay_summary(
        {"base": 100.0, "steady": 80.0, "fickle": 90.0},
        {"base": 100.0, "steady": 70.0, "fickle": 120.0},
    )
    text = render_docs().search_replay(summary)
    steady = next(line for line in text.splitlines() if line.startswith("| steady | 0.80x"))
    assert "0.80x / 0.70x: both blocks agree, less" in steady
    fickle = next(line for line in text.splitlines() if line.startswith("| fickle | 0.90x"))
    assert "0.90x / 1.20x: blocks disagree" in fickle
    assert "On the held-out block the least median compute to 95%: steady." in text


def default_deciders() -> list[str]:
    """The replay summaries marked as deciding the shipped default sampler (`--decides-default`)."""
    result = json.loads((ROOT / "benchmarks/results/search_replay.json").read_text())
    return sorted(key for key, entry in result.items() if entry.get("decides_default"))


DEFAULT_SPACES = ("quickstart.yaml", "paper-wrn-joint.yaml", "paper-dct-joint.yaml")


@pytest.mark.parametrize("key", default_deciders())
def test_the_default_sampler_wins_the_held_out_block(key):
    """The quickstart and the joint spaces name the sampler (and options) whose sweeps spent the
    least median compute to 95% on the held-out block of each deciding summary."""
    from tune_lowmem.space import SearchSpace

    entry = json.loads((ROOT / "benchmarks/results/search_replay.json").read_text())[key]
    winners = [
        (row["settings"]["sampler"], row["settings"]["sampler_options"])
        for row in render_docs().held_out_winners(entry)
    ]
    for name in DEFAULT_SPACES:
        space = SearchSpace.load(ROOT / "search_spaces" / name)
        assert (space.sampler.name, dict(space.sampler.options)) in winners, (name, winners)


def doubled(value):
    """`value` with every figure doubled: a float held under a key, or a figure written in a
    string (a recorded output's line); ints, as indices and counts, and lists' floats, as a
    benchmark's settings, kept."""
    if isinstance(value, dict):
        return {key: 2 * v if isinstance(v, float) else doubled(v) for key, v in value.items()}
    if isinstance(value, list):
        return [v if isinstance(v, float) else doubled(v) for v in value]
    if isinstance(value, str):
        return FIGURE.sub(lambda m: m[0].replace(m["value"], str(2 * float(m["value"]))), value)
    return value


def regions() -> list[tuple[str, str]]:
    """(result file, entry or "") of every generated table on the pages whose result file has
    been written (`test_a_region_without_its_result_file_says_it_is_not_measured_yet`: the
    others)."""
    docs = render_docs()
    found = {m[1:3] for page in PAGES for m in docs.REGION.findall(page.read_text())}
    return sorted(r for r in found if (docs.RESULTS / f"{r[0]}.json").exists())


def test_a_region_without_its_result_file_says_it_is_not_measured_yet(tmp_path, monkeypatch):
    docs = render_docs()
    monkeypatch.setattr(docs, "RESULTS", tmp_path)
    page = docs.render("<!-- results:time_accuracy -->\n<!-- /results -->\n")
    assert "Not measured yet: `benchmarks/results/time_accuracy.json`" in page
    assert "`benchmarks/time_accuracy.py` on a quiet machine" in page


@pytest.mark.parametrize("name, key", regions())
def test_every_table_shows_its_results_figures(name, key):
    docs = render_docs()
    result = json.loads((docs.RESULTS / f"{name}.json").read_text())
    result = result[key] if key else result
    assert docs.RENDERERS[name](doubled(result)) != docs.RENDERERS[name](result)


def test_one_result_file_per_benchmark_and_every_run_in_it_on_a_page():
    shown = regions()
    for path in sorted(render_docs().RESULTS.glob("*.json")):
        name = path.stem
        assert (path.parents[1] / f"{name}.py").exists(), name
        keys = {key for shown_name, key in shown if shown_name == name}
        assert keys, f"{name}.json is on no page"
        if keys != {""}:  # a file of entries: each is on a page
            assert keys == set(json.loads(path.read_text())), name


@pytest.mark.parametrize("page", FRONT, ids=lambda p: str(p.relative_to(ROOT)))
def test_front_pages_quote_no_figure_outside_a_generated_table(page):
    text = GENERATED.sub("", page.read_text())
    assert [m[0] for m in FIGURE.finditer(text)] == []


def numbers(value) -> list[float]:
    """The numbers in a JSON value or a table's cell (a list or array of them included)."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple, np.ndarray)):
        return [n for v in value for n in numbers(v)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [abs(value)]
    return []


@functools.cache
def written(path: Path, places: int, scale: int) -> frozenset[str]:
    """The numbers a result file holds (a JSON file's values, a recorded table's cells), times
    `scale`, as written with `places` decimals."""
    if path.suffix == ".parquet":
        held = numbers(pd.read_parquet(path).to_numpy().ravel().tolist())
    else:
        held = numbers(json.loads(path.read_text()))
    return frozenset(f"{scale * v:.{places}f}" for v in held)


def sources(text: str) -> list[Path]:
    """The result files of the benchmarks a page names (by a region, a result file or its
    script): each one's `results/NAME.json` and the tables it records beside it."""
    benchmarks = ROOT / "benchmarks"
    names = {next(filter(None, m)) for m in NAMED.findall(text)}
    return [
        path
        for name in sorted(names)
        if (benchmarks / f"{name}.py").exists()
        for path in [benchmarks / "results" / f"{name}.json", *benchmarks.glob(f"{name}*.parquet")]
        if path.exists()
    ]


def unheld_figures(text: str) -> list[str]:
    """The figures a page states outside its generated tables that no result file it draws on
    holds, at the figure's precision (a share in % also as a fraction), and that are not marked
    as no measurement."""
    files, prose, unheld = sources(text), GENERATED.sub("", text), []
    for match in FIGURE.finditer(prose):
        if NOT_MEASURED.match(prose, match.end()):
            continue
        scales = (1, 100) if match[0].endswith("%") else (1,)
        for figure in filter(None, (match["low"], match["value"])):
            places = len(figure.split(".")[1])
            if not any(figure in written(f, places, s) for f in files for s in scales):
                unheld.append(match[0])
    return unheld


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_a_page_states_is_held_by_its_result_files(page):
    assert unheld_figures(page.read_text()) == []


@functools.cache
def integers(path: Path) -> frozenset[int]:
    """The whole numbers a result file holds (a JSON file's values, a recorded table's cells)."""
    if path.suffix == ".parquet":
        held = numbers(pd.read_parquet(path).to_numpy().ravel().tolist())
    else:
        held = numbers(json.loads(path.read_text()))
    return frozenset(int(v) for v in held if float(v).is_integer())


def unheld_integers(text: str) -> list[str]:
    """The integer claims (`INTEGER`) a page makes in its prose, outside its generated tables
    and code, that no result file it draws on holds, and that are not marked as no
    measurement."""
    files = sources(text)
    prose = CODE.sub("", GENERATED.sub("", text))
    return [
        match[0]
        for match in INTEGER.finditer(prose)
        if not NOT_MEASURED.match(prose, match.end())
        and not any(int(match["value"].replace(",", "")) in integers(f) for f in files)
    ]


GENERATED_PAGES = [page for page in PAGES if GENERATED.search(page.read_text())]


@pytest.mark.parametrize("page", GENERATED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_count_a_generated_page_states_is_held_by_its_result_files(page):
    assert unheld_integers(page.read_text()) == []


def test_a_count_its_result_file_does_not_hold_is_found():
    """The fidelity protocol's 20 seeds and 4 epochs are held; 21 seeds, a count in code, and a
    marked setting are not claims it makes."""
    page = "From `benchmarks/results/fidelity.json`: {} seeds, 4 epochs, `7 runs`, 9 runs{}."
    assert unheld_integers(page.format("20", "")) == ["9 runs"]
    assert unheld_integers(page.format("21", "<!-- not measured: a setting -->")) == ["21 seeds"]


def test_a_figure_its_result_file_does_not_hold_is_found():
    """A stale figure (the ladder's rung 27 before its rerun), a figure of a file the page does
    not name, and an unmarked constant are found; the held one and the marked one are not."""
    page = "From `benchmarks/results/memory_ladder.json`: 136.64x, {} and 1.96 x{}."
    assert unheld_figures(page.format("136.86x", "")) == ["136.86x", "1.96 x"]
    assert unheld_figures(page.format("0.11-0.46 MB", "<!-- not measured: a constant -->")) == []
    assert unheld_figures("no result file named: 136.58x") == ["136.58x"]


def shown_commands() -> list[tuple[str, str, list[str]]]:
    """(page, command, flags) of every `tune-lowmem COMMAND ...` the docs show."""
    shown = []
    for page in PAGES:
        code = "\n".join(CODE.findall(page.read_text()))
        for match in COMMAND.finditer(code):
            flags = re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", match.group(2))
            shown.append((str(page.relative_to(ROOT)), match.group(1), flags))
    return shown


def help_of(command: str) -> str | None:
    """`tune-lowmem COMMAND --help`, or None where there is no such command."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main([command, "--help"])
        except SystemExit as exit_:
            if exit_.code != 0:
                return None
    return out.getvalue()


def test_every_command_and_flag_the_docs_show_exists():
    shown, missing = shown_commands(), []
    for page, command, flags in shown:
        text = help_of(command)
        if text is None:
            missing.append(f"{page}: tune-lowmem {command}")
            continue
        missing += [
            f"{page}: tune-lowmem {command} {flag}"
            for flag in flags
            if not re.search(rf"(?<![\w-]){flag}(?![\w-])", text)
        ]
    assert len(shown) >= 20 and missing == []


def test_every_linked_file_exists():
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in PAGES
        for target in LINK.findall(page.read_text())
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert broken == []


def test_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    setup = readme.split("```")[1]
    assert "./setup.sh && .venv/bin/tune-lowmem launch search_spaces/quickstart.yaml" in setup
    assert "./setup.sh && .venv/bin/pytest" in setup
    for command in ("launch", "status", "pareto", "report", "resume"):
        assert f"tune-lowmem {command} " in readme


# words that tell what the project was rather than what it is
HISTORY = re.compile(r"\b(?:no longer|previously|formerly|any ?more|was replaced|were replaced)\b")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_say_what_is_not_what_was(page):
    prose = GENERATED.sub("", page.read_text())
    assert HISTORY.findall(prose) == []


def test_the_readme_code_map_names_every_part_of_the_package():
    """Every module and folder of tune_lowmem/ is on the map and the map names no other: a part
    added, renamed or moved changes the map with it."""
    code_map = (ROOT / "README.md").read_text().split("\n## The code\n", 1)[1].split("\n## ")[0]
    named = set(re.findall(r"`(\w+(?:\.py|/))`", code_map))
    package = ROOT / "tune_lowmem"
    parts = {
        p.name + ("/" if p.is_dir() else "")
        for p in package.iterdir()
        if p.name not in ("__init__.py", "__pycache__")
    }
    beside = {p.name + "/" for p in ROOT.iterdir() if p.is_dir()}  # the folders beside it
    assert parts <= named
    assert named - parts <= beside

"""The report (file://) and the live dashboard (127.0.0.1) in real headless Chromium."""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from synthetic import synthetic_sweep, write_demo_like

from shapesweep.common import human
from shapesweep.dashboards.figures import applicable_figures
from shapesweep.dashboards.frames import with_derived
from shapesweep.dashboards.report import budget_labels, load_frames, write_report
from shapesweep.dashboards.server import make_server
from shapesweep.dashboards.views import analysis_views
from shapesweep.families.base import candidate_label
from shapesweep.results.store import load_layers, write_trial
from shapesweep.search_spaces.configs import TrainConfig, make_config

HOSTILE = "<script>alert(1)</script>"
ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

pytestmark = [pytest.mark.system,
              pytest.mark.skipif(not Path(CHROMEDRIVER).exists() or not Path(CHROMIUM).exists(),
                                 reason="needs Debian chromium + chromium-driver (make browser)")]


@pytest.fixture(scope="module")
def store(synthetic_store) -> str:
    return synthetic_store


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--window-size=1500,1100"):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    yield driver
    driver.quit()


def _open(driver, url: str) -> None:
    driver.get(url)
    deadline = time.time() + 60
    while driver.execute_script("return document.body && document.body.dataset.ready") != "1":
        assert time.time() < deadline, "the dashboard never finished rendering"
        time.sleep(0.1)


def _no_alert(driver) -> None:
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018 - raises unless an alert is open


def _console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _check_every_figure_renders(driver) -> list[str]:
    figures = driver.find_elements(By.CSS_SELECTOR, "div.figure")
    assert len(figures) >= 10
    for figure in figures:
        assert figure.find_elements(By.CSS_SELECTOR, "svg.main-svg"), figure.get_attribute("id")
        drawn = figure.find_elements(By.CSS_SELECTOR, ".scatterlayer .trace, .barlayer .trace, .parcoords .y-axis")
        assert drawn, f"{figure.get_attribute('id')} has no traces drawn"
    return [f.get_attribute("id") for f in figures]


def _shown_points(driver, figure_id: str) -> int:
    return driver.execute_script(
        "return document.getElementById(arguments[0]).data"
        ".filter(t => t.visible !== false).reduce((n, t) => n + (t.x ? t.x.length : 0), 0)", figure_id)


def _click_a_point(driver, figure_id: str) -> None:
    point = driver.find_element(By.CSS_SELECTOR, f"#{figure_id} .scatterlayer .trace .points path")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", point)
    ActionChains(driver).move_to_element(point).pause(0.3).click().perform()


def _download(driver, downloads: Path) -> dict:
    for old in downloads.iterdir():
        old.unlink()
    driver.find_element(By.ID, "download").click()
    deadline = time.time() + 60
    while not [p for p in downloads.iterdir() if p.suffix == ".yaml"]:
        assert time.time() < deadline, "no file was downloaded"
        time.sleep(0.1)
    (path,) = [p for p in downloads.iterdir() if p.suffix == ".yaml"]
    return yaml.safe_load(path.read_text())


def _check_candidate(doc: dict) -> None:
    """What `shapesweep train` does with the file: a typed model config and a TrainConfig."""
    config = make_config(doc["model"] | {"family": doc["family"]})
    TrainConfig(**doc["train"])
    assert config.family == doc["family"] and doc["provenance"]["trial_id"]


def _plain(values) -> list | None:
    """A trace's array as the page holds it once decoded: a list, NaN as None."""
    if values is None or isinstance(values, str):
        return values
    if hasattr(values, "tolist"):
        values = values.tolist()
    return [_plain(v) if isinstance(v, list | tuple) else None if isinstance(v, float) and math.isnan(v)
            else v for v in values]


def _same_traces(page: list[dict], figure) -> None:
    """The page's traces carry the figure's own texts, hover rows and coordinates (float32 ones
    to 7 digits): what a hover reads is what `figures.py` built."""
    assert len(page) == len(figure.data)
    for shown, trace in zip(page, figure.data, strict=True):
        for key in ("text", "customdata", "x", "y"):
            want = _plain(trace.get(key))
            if isinstance(want, list) and want and any(isinstance(v, float) for v in want):
                numbers = [[math.nan if v is None else v for v in side] for side in (shown[key], want)]
                np.testing.assert_allclose(*numbers, rtol=1e-6, err_msg=key)
            else:
                assert shown.get(key) == want, key


def test_report_in_the_browser(store, browser, downloads, tmp_path):
    sweeps = ["ucurve", "shapes", "mlp"]
    report = write_report(store, sweeps, tmp_path / "report.html")
    _open(browser, report.as_uri())
    ids = _check_every_figure_renders(browser)
    assert "fig-ucurve" in ids and "fig-scaling" in ids and "fig-widths" in ids
    assert _console_errors(browser) == []
    # Hover titles are built in the page from the rows: the texts read as the figures' own.
    trials, curves = load_frames(store, sweeps)
    trials = with_derived(trials)
    assert browser.execute_script("return S.data.rows.hover") == trials["hover"].tolist()
    # Every trace as the page draws it, decoded (row ids, codes, typed and shared arrays) and
    # before any filter, reads as the figure built in Python.
    shown = browser.execute_script(
        "return Object.fromEntries(Object.entries(S.originals).map(([id, f]) => [id, f.data.map("
        "(t) => ({x: t.x, y: t.y, text: t.text, customdata: t.customdata}))]))")
    figures = dict(applicable_figures(trials.assign(budget=budget_labels(trials)), curves,
                                      load_layers(store, sweeps)) + analysis_views(trials))
    assert sorted(shown) == sorted(figures)
    for figure_id, figure in figures.items():
        _same_traces(shown[figure_id], figure)
    # The statistics panels: paired intervals vs the baseline, rank fidelity, grey tuned values.
    assert "fig-vs-baseline-lm" in ids and "fig-rank-fidelity-lm" in ids
    assert _shown_points(browser, "fig-vs-baseline-lm") > 0 and _shown_points(browser, "fig-rank-fidelity-lm") > 0
    assert browser.find_elements(By.CSS_SELECTOR, "#fig-vs-baseline-lm .errorbar")
    assert browser.find_elements(By.CSS_SELECTOR, "#fig-ucurve .errorbar")
    assert browser.find_elements(By.CSS_SELECTOR, "#fig-rank-fidelity-lm .shapelayer path")  # tau = 0.8

    # Hostile names render as text, never as markup.
    _no_alert(browser)
    assert HOSTILE in browser.find_element(By.ID, "subtitle").text
    assert f"RuntimeError: {HOSTILE}" in browser.find_element(By.ID, "failed-body").text
    assert not browser.find_elements(By.CSS_SELECTOR, "#subtitle script, #failed-body script")

    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "report.png"))

    # A filter changes what is shown: figures and the top-trials table.
    before = _shown_points(browser, "fig-pareto-lm-params_non_embedding")
    before_vs = _shown_points(browser, "fig-vs-baseline-lm")
    top_text = browser.find_element(By.ID, "top-tables").text
    assert "hourglass" in top_text
    browser.find_element(By.CSS_SELECTOR, "#filter-family input[value='hourglass']").click()
    after = _shown_points(browser, "fig-pareto-lm-params_non_embedding")
    assert 0 < after < before
    assert 0 < _shown_points(browser, "fig-vs-baseline-lm") < before_vs
    assert browser.execute_script(  # both sides of each interval are filtered with its point
        "return document.getElementById('fig-vs-baseline-lm').data.every(t => "
        "t.error_y.array.length === t.x.length && t.error_y.arrayminus.length === t.x.length)")
    assert "hourglass" not in browser.find_element(By.ID, "top-tables").text
    browser.find_element(By.CSS_SELECTOR, "#filter-family input[value='hourglass']").click()
    assert _shown_points(browser, "fig-pareto-lm-params_non_embedding") == before

    # Selecting a point shows its configuration; the export is a config `train` accepts.
    _click_a_point(browser, "fig-pareto-lm-params_non_embedding")
    assert "trial" in browser.find_element(By.ID, "config-title").text
    assert "family:" in browser.find_element(By.ID, "config-yaml").text
    _check_candidate(_download(browser, downloads))
    browser.save_screenshot(str(ARTIFACTS / "report-selected.png"))


@pytest.fixture()
def live(store):
    server = make_server(store, "127.0.0.1", 0, poll_s=0.5)
    assert server.state.snapshots.wait_built(300)  # the first request answers at once; the page, built
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_live_dashboard_refreshes_and_exports(store, browser, downloads, live):
    _open(browser, live)
    _check_every_figure_renders(browser)
    _no_alert(browser)
    assert HOSTILE in browser.find_element(By.ID, "subtitle").text
    version = browser.execute_script("return document.body.dataset.version")

    # A trial landing in a new sweep shows up without reloading the page.
    row, curves = synthetic_sweep("late", 1, families=("hourglass",), seed=5)[0]
    write_trial(store, "late", row, curves)
    deadline = time.time() + 60
    while not browser.find_elements(By.CSS_SELECTOR, "#filter-sweep input[value='late']"):
        assert time.time() < deadline, "the new sweep never appeared"
        time.sleep(0.2)
    assert browser.execute_script("return document.body.dataset.version") != version
    assert _console_errors(browser) == []

    _click_a_point(browser, "fig-pareto-lm-params_total")
    assert "/api/config?" in browser.find_element(By.ID, "download").get_attribute("href")
    _check_candidate(_download(browser, downloads))
    browser.save_screenshot(str(ARTIFACTS / "live.png"))


def test_live_api_answers_in_plain_text_for_bad_names(store, live):
    version = json.load(urllib.request.urlopen(live + "api/version"))["version"]
    assert len(version) == 16
    for query in (f"sweep={HOSTILE}&trial_id=t00000", "sweep=nope&trial_id=t00000", "sweep=ucurve&trial_id=x"):
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(live + "api/config?" + urllib.parse.quote(query, safe="=&"))
        assert error.value.code == 404
        assert error.value.headers["Content-Type"].startswith("text/plain")
    ok = urllib.request.urlopen(live + "api/config?sweep=ucurve&trial_id=t00000")
    assert "attachment" in ok.headers["Content-Disposition"]
    _check_candidate(yaml.safe_load(ok.read()))


def _figure_problems(driver) -> list[str]:
    """What a reader would trip over, per figure: an empty panel, a legend entry not shown
    (scrolled away or clipped), an axis title that is not the layout's, a log-axis tick
    label that is not its value (plotly writes 20 as "2")."""
    return driver.execute_script("""
      const human = (n) => { for (const [u, s] of [["E", 1e18], ["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["K", 1e3]])
          if (Math.abs(n) >= s) return +(n / s).toPrecision(3) + u; return String(+n.toPrecision(3)); };
      const problems = [];
      for (const gd of document.querySelectorAll("div.figure")) {
        const id = gd.id, full = gd._fullLayout;
        const drawn = [...gd.querySelectorAll(".scatterlayer .trace path, .barlayer .trace path")]
          .filter((p) => (p.getAttribute("d") || "").length > 2);
        const parallel = gd.querySelectorAll(".parcoords .y-axis").length;  // its axes are its data
        // A view with nothing to draw says why in one line, on a panel without axes.
        const note = full.xaxis && full.xaxis.visible === false && gd.querySelector(".textpoint text");
        if (!drawn.length && !parallel && !note) problems.push(id + ": empty panel");
        const entries = gd.data.filter((t) => t.showlegend !== false && t.name && t.visible !== false).length;
        const legend = gd.querySelector(".legend");
        const items = legend ? [...legend.querySelectorAll(".traces")] : [];
        if (full.showlegend && items.length < entries) problems.push(id + ": legend shows " + items.length + " of " + entries);
        if (legend) {
          const box = legend.querySelector(".bg").getBoundingClientRect(), fig = gd.getBoundingClientRect();
          if (box.top < fig.top - 1 || box.bottom > fig.bottom + 1 || box.left < fig.left - 1 || box.right > fig.right + 1)
            problems.push(id + ": legend outside the figure");  // drawn where no one sees it
          const hidden = items.filter((it) => { const r = it.getBoundingClientRect();
            return r.height === 0 || r.top < box.top - 1 || r.bottom > box.bottom + 1; });
          if (hidden.length) problems.push(id + ": " + hidden.length + " legend entries hidden");
          const bar = legend.querySelector(".scrollbar");
          if (bar && bar.getBoundingClientRect().height > 0) problems.push(id + ": legend scrolls");
        }
        for (const axis of ["xaxis", "yaxis"]) {
          if (!full[axis]) continue;  // parallel coordinates: axes of their own
          const want = (full[axis].title && full[axis].title.text) || "";
          const shown = gd.querySelector("." + axis[0] + "title");
          if (want && (!shown || shown.textContent !== want)) problems.push(id + ": " + axis + " title " + (shown && shown.textContent));
        }
        if (full.xaxis && full.xaxis.type === "log")
          for (const tick of full.xaxis._vals || []) if (tick.text !== human(+Math.pow(10, tick.x).toPrecision(12)))
            problems.push(id + ": log tick " + Math.pow(10, tick.x) + " labelled " + tick.text);
      }
      return problems;""")


def test_figures_are_complete_and_labelled_at_1024_px(store, browser, tmp_path):
    """At a laptop's 1024 px every panel has data, every legend entry is visible (none
    scrolled away) and every axis says what it shows."""
    report = write_report(store, ["ucurve", "shapes", "mlp"], tmp_path / "report.html")
    size = browser.get_window_size()
    browser.set_window_size(1024, 900)
    try:
        _open(browser, report.as_uri())
        time.sleep(0.5)  # responsive plots re-lay out after the resize
        assert _figure_problems(browser) == []
        assert len(browser.find_elements(By.CSS_SELECTOR, "div.figure")) >= 10
        # the top table says how many it lists of how many match
        count = browser.find_element(By.CSS_SELECTOR, ".top-count").text
        rows = len(browser.find_elements(By.CSS_SELECTOR, "#top-tables section:first-child tbody tr"))
        assert count.startswith(f"the best {rows} of ") or count.startswith(f"{rows} completed")
        assert "± -" not in browser.page_source
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "report-1024.png"))
    finally:
        browser.set_window_size(size["width"], size["height"])


def test_the_demos_report_for_two_sweeps_of_its_space(browser, tmp_path):
    """Two runs of the demo's space in one report: one iso-budget figure (the U-curve), every
    figure complete with its legend in view (the parameter split and the comparison with the
    baseline had theirs drawn above the figure)."""
    root = str(tmp_path / "store")
    write_demo_like(root, ("demo-ucurve", "demo-ucurve-2"))
    _open(browser, write_report(root, ["demo-ucurve", "demo-ucurve-2"], tmp_path / "demo.html").as_uri())
    ids = [f.get_attribute("id") for f in browser.find_elements(By.CSS_SELECTOR, "div.figure")]
    assert "fig-ucurve" in ids and "fig-searched-lm" not in ids
    assert {"fig-param-split", "fig-vs-baseline-lm"} <= set(ids)
    assert _figure_problems(browser) == []
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "report-demo.png"))


def test_one_trial_sweep_draws_no_one_dot_panels(browser, tmp_path):
    root = str(tmp_path / "store")
    row, curves = synthetic_sweep("single", 1, families=("hourglass",), seed=4)[0]
    write_trial(root, "single", {**row, "status": "completed"}, curves)
    report = write_report(root, ["single"], tmp_path / "single.html")
    _open(browser, report.as_uri())
    ids = [f.get_attribute("id") for f in browser.find_elements(By.CSS_SELECTOR, "div.figure")]
    assert not [i for i in ids if i.startswith("fig-pareto")]  # one point is no frontier
    assert "fig-curves-lm" in ids and _figure_problems(browser) == []


def _live_store(root: str):
    """A sweep with one completed, one stopped and one running trial (its first points)."""
    from shapesweep.results import live

    pairs = synthetic_sweep("watch", 3, families=("hourglass",), seed=6)
    (done, done_curve), (row, curve), (stopped, stopped_curve) = pairs
    write_trial(root, "watch", {**done, "status": "completed"}, done_curve)
    write_trial(root, "watch", {**stopped, "status": "stopped_early"}, stopped_curve)
    spec = {"trial_id": "running-1", "key": row["key"], "seed": 0, "tuned_json": "{}",
            "row": {k: v for k, v in row.items() if k not in ("trial_id", "status")},
            "document": json.loads(row["config_json"])}
    points = [{k: p.get(k) for k in ("step", "tokens", "train_loss", "val_loss", "lr", "elapsed_s")}
              for p in curve]
    budget = int(curve[-1]["tokens"])

    def add(n: int) -> None:
        for point in points[:n]:
            live.append_point(root, "watch", spec, point, budget)
        del points[:n]

    return add, stopped["tokens"], candidate_label(spec["row"] | {"tuned_json": "{}"})


def _running_points(driver) -> int:
    return driver.execute_script(
        "const gd = document.getElementById('fig-curves-lm'); if (!gd || !gd.data) return 0;"
        "return gd.data.filter(t => t.mode === 'lines' && t.name && t.name.includes('(running)'))"
        ".reduce((n, t) => n + t.y.filter(v => v !== null && !Number.isNaN(v)).length, 0)")


def test_serve_draws_a_running_trials_curve_as_it_grows(browser, tmp_path):
    """A live file in the sweep folder shows as a curve in `serve`; points appended to it
    appear after a poll; the stopped trial says where ASHA stopped it."""

    root = str(tmp_path / "store")
    add, stopped_at, running_label = _live_store(root)
    add(2)
    server = make_server(root, "127.0.0.1", 0, poll_s=0.3)
    assert server.state.snapshots.wait_built(300)  # the first request answers at once; the page, built
    threading.Thread(target=server.serve_forever, daemon=True).start()
    browser.get("about:blank")  # an earlier test's page polled a server now gone
    browser.get_log("browser")
    try:
        _open(browser, f"http://127.0.0.1:{server.server_address[1]}/")
        assert _running_points(browser) == 2
        assert "1 running" in browser.find_element(By.ID, "subtitle").text
        table = browser.find_element(By.ID, "failed-body").text
        assert running_label in table and "running:" in table  # named, not by its trial id
        assert f"stopped by ASHA at {human(stopped_at)} tokens" in table
        add(2)
        deadline = time.time() + 60
        while _running_points(browser) != 4:
            assert time.time() < deadline, "the running curve never grew"
            time.sleep(0.2)
        assert _figure_problems(browser) == [] and _console_errors(browser) == []
    finally:
        server.shutdown()
        server.server_close()

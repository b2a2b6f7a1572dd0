"""The analysis views (parallel coordinates, fANOVA importance, slices) and xformer's
Figure 7 from a real small sweep, in real headless Chromium (the report and `serve`)."""

from __future__ import annotations

import threading

import pytest
from selenium.webdriver.common.by import By
from test_analysis import VFORMER_SPACE
from test_dashboard_browser import (  # noqa: F401 - browser and downloads are fixtures
    ARTIFACTS,
    _console_errors,
    _open,
    browser,
    downloads,
)

from shapesweep.dashboards.frames import METRIC_LABELS
from shapesweep.dashboards.report import write_report
from shapesweep.dashboards.server import make_server
from shapesweep.results.store import load_layers, load_trials
from shapesweep.trainers.analysis import THRESHOLDS

pytestmark = pytest.mark.system  # Chromium: `make browser`
SWEEPS = ["mlp", "shapes", "ucurve"]  # the views' index is the sweep's place in sorted order


def _texts(driver, figure_id: str, selector: str) -> list[str]:
    figure = driver.find_element(By.ID, f"fig-{figure_id}")
    return [e.get_attribute("textContent") for e in figure.find_elements(By.CSS_SELECTOR, selector)]


def _data(driver, figure_id: str, expression: str):
    """`expression` over the figure's plotted traces `d` (what plotly drew, after the filters)."""
    return driver.execute_script(f"const d = document.getElementById(arguments[0]).data; return {expression};",
                                 f"fig-{figure_id}")


def _check_lm_views(driver, index: int) -> None:
    """Parallel coordinates: an axis per varying field and the loss, a line per candidate;
    importance: a bar per field group on a labelled share axis; slices: a labelled panel per field."""
    loss = METRIC_LABELS["val_loss"]
    axes = _texts(driver, f"views-parallel-{index}", ".parcoords .axis-title")
    assert len(axes) >= 3 and axes[-1] == loss and "d_model" in axes
    n_lines = _data(driver, f"views-parallel-{index}", "d[0].dimensions[0].values.length")
    assert n_lines >= 8 and driver.find_elements(By.CSS_SELECTOR, f"#fig-views-parallel-{index} canvas.gl-canvas")

    bars = _texts(driver, f"views-importance-{index}", ".barlayer .trace .point path")
    fields = _texts(driver, f"views-importance-{index}", ".yaxislayer-above .ytick text")
    assert len(bars) == len(fields) >= 2 and any(f.startswith("d_model") for f in fields)
    assert _texts(driver, f"views-importance-{index}", ".xtitle") == [
        f"fANOVA importance for {loss} (share, sums to 1)"]
    assert sum(_data(driver, f"views-importance-{index}", "d[0].x")) == pytest.approx(1.0)

    titles = _texts(driver, f"views-slices-{index}", ".infolayer g[class^='g-x'] text")
    assert "d_model" in titles and set(titles) <= set(axes)  # one panel per field, no other axis
    assert loss in _texts(driver, f"views-slices-{index}", ".infolayer g[class^='g-y'] text")
    points = driver.find_elements(By.CSS_SELECTOR, f"#fig-views-slices-{index} .scatterlayer .trace .points path")
    assert len(points) == len(titles) * n_lines  # every candidate in every panel


def test_views_in_the_report(synthetic_store, browser, tmp_path):  # noqa: F811 - the fixture
    report = write_report(synthetic_store, SWEEPS, tmp_path / "report.html")
    _open(browser, report.as_uri())
    for index in (1, 2):  # shapes (conventional + ><former shapes), ucurve (conventional + hourglass)
        _check_lm_views(browser, index)
    # k of a conventional model is the category "–" beside the hourglass k values.
    assert "–" in _texts(browser, "views-parallel-2", ".parcoords .tick text")
    # mlp has 4 candidates, 2 of them with a seed ASHA stopped (no result): its views say why
    # they draw nothing.
    for kind in ("parallel", "importance", "slices"):
        assert _texts(browser, f"views-{kind}-0", ".textpoint text") == [
            "2 candidates with a result: the views need at least 3"]
    assert METRIC_LABELS["psnr"] in _texts(browser, "pareto-vision-params_incl_frozen", ".ytitle")
    # The hourglass-mlp paper's Pareto counts W_in; its table names the trainable count.
    assert _texts(browser, "pareto-vision-params_incl_frozen", ".xtitle") == [
        "parameters incl. W_in (trainable + fixed)"]
    heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "section.top[data-metric='psnr'] th")]
    assert "trainable params" in heads and "non-emb params" not in heads
    assert _console_errors(browser) == []
    browser.execute_script("arguments[0].scrollIntoView()", browser.find_element(By.ID, "fig-views-parallel-2"))
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "views.png"))

    # The sweep filter hides a sweep's views; the family filter thins the slices' points.
    before = len(browser.find_elements(By.CSS_SELECTOR, "#fig-views-slices-2 .scatterlayer .trace .points path"))
    browser.find_element(By.CSS_SELECTOR, "#filter-family input[value='hourglass']").click()
    after = len(browser.find_elements(By.CSS_SELECTOR, "#fig-views-slices-2 .scatterlayer .trace .points path"))
    assert 0 < after < before
    browser.find_element(By.CSS_SELECTOR, "#filter-sweep input[value='ucurve']").click()
    assert _data(browser, "views-parallel-2", "d[0].visible") is False


@pytest.fixture()
def live(synthetic_store):
    server = make_server(synthetic_store, "127.0.0.1", 0, poll_s=0.5)
    assert server.state.snapshots.wait_built(300)  # the first request answers at once; the page, built
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_views_in_the_live_dashboard(browser, live):  # noqa: F811 - the fixture
    _open(browser, live)
    _check_lm_views(browser, 2)
    assert _console_errors(browser) == []
    browser.get("about:blank")  # stop polling before the server goes away


@pytest.mark.slow
def test_figure_7_from_a_real_sweep(local_ray, browser, tmp_path):  # noqa: F811 - the fixture
    """xformer Fig. 7 drawn from a real sweep's `layers` rows: a constant-width model and a
    ><former, analysed at the end of real training, entropy and density against depth."""
    from sweep_helpers import run, write_space

    root = tmp_path / "sweeps"
    assert run("run", str(write_space(tmp_path, VFORMER_SPACE)), "--root", str(root),
               "--scheduler", "fifo", "--max-concurrent", "2") == 0
    trials, layers = load_trials(root, ["tiny-vformer"]), load_layers(root, ["tiny-vformer"])
    assert sorted(trials["shape"]) == ["bottleneck", "constant"] and len(layers)
    out = tmp_path / "report.html"
    assert run("dashboard", "tiny-vformer", "--root", str(root), "--out", str(out)) == 0
    _console_errors(browser)  # read: the log holds this page's messages only
    _open(browser, out.as_uri())

    panels = _texts(browser, "layers", ".annotation-text")  # the subplot titles
    assert panels == ["matrix entropy of the residual stream",
                      *(f"MLP activation density, |a| > {t:g}" for t in THRESHOLDS)]
    assert set(_texts(browser, "layers", ".infolayer g[class^='g-x'] text")) == {"depth (layer / n_layers)"}
    # One line per model in every panel, dashed for constant width, each point a layer.
    traces = _data(browser, "layers", "d.map(t => [t.name, t.line.dash, t.x.length, t.y.every(v => v >= 0 && v <= 1)])")
    assert len(traces) == 2 * len(panels)
    n_layers = VFORMER_SPACE["fixed"]["n_layers"]
    for name, dash, n_points, in_range in traces:
        assert dash == ("dash" if "constant" in name else "solid") and n_points == n_layers and in_range
    assert {name.split(" ")[0] for name, *_ in traces} == {"variable_width"}
    names = sorted({name for name, *_ in traces})  # candidate labels: variant, shape, widths
    assert len(names) == 2 and "bottleneck β=" in names[0] and names[1].endswith(" constant")
    drawn = browser.find_elements(By.CSS_SELECTOR, "#fig-layers .scatterlayer .trace .points path")
    assert len(drawn) == 2 * len(panels) * n_layers
    assert _console_errors(browser) == []
    browser.execute_script("arguments[0].scrollIntoView()", browser.find_element(By.ID, "fig-layers"))
    browser.save_screenshot(str(ARTIFACTS / "figure-7.png"))

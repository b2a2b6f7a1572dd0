"""The report (file://) and the live dashboard (127.0.0.1) in real headless Chromium."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from shapesweep.dashboards.report import write_report
from shapesweep.dashboards.server import make_server
from shapesweep.dashboards.synthetic import synthetic_sweep
from shapesweep.results.store import write_trial
from shapesweep.search_spaces.configs import TrainConfig, make_config

HOSTILE = "<script>alert(1)</script>"
ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

pytestmark = pytest.mark.skipif(not Path(CHROMEDRIVER).exists() or not Path(CHROMIUM).exists(),
                                reason="needs Debian chromium + chromium-driver (make browser)")


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
    deadline = time.time() + 20
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


def test_report_in_the_browser(store, browser, downloads, tmp_path):
    report = write_report(store, ["ucurve", "shapes", "mlp"], tmp_path / "report.html")
    _open(browser, report.as_uri())
    ids = _check_every_figure_renders(browser)
    assert "fig-ucurve" in ids and "fig-scaling" in ids and "fig-widths" in ids
    assert _console_errors(browser) == []
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
    deadline = time.time() + 30
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

"""The trigger form and the clear dialog, driven in a real browser (Debian's Chromium).

A new user's path through the UI: log in, open `image_model_pipeline`, fill the
form, trigger, wait for the run, then clear one task without its downstream
tasks and see that only it ran again. A screenshot of the filled form is kept
in `test-output/ui/` (and under the test's tmp folder). Slow tier: the browser
comes from `scripts/browser.sh` (Debian's `chromium`, installed when missing)
and Playwright drives it; no browser is downloaded at run time.
"""

import shutil
import subprocess
import time

import pytest

from orchestration.params import dag_params
from tests.dags.airflow_env import DAG_ID, REPO

PARAMS = dag_params(input_uri="in", output_root="out", model_root="models")

pytestmark = pytest.mark.extended

KEPT = REPO / "test-output" / "ui"
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture(scope="module")
def chromium() -> str:
    found = subprocess.run(
        [str(REPO / "scripts" / "browser.sh")], capture_output=True, text=True, timeout=900
    )
    assert found.returncode == 0, found.stderr[-3000:]
    return found.stdout.strip().splitlines()[-1]


def _log_in(page, standalone) -> None:
    page.goto(standalone.base + "/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", standalone.password)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: "/auth/login" not in url, timeout=60_000)


def _task_tries(standalone, run_id: str) -> dict[str, int]:
    status, body = standalone.request(
        "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances"
    )
    assert status == 200, body
    return {t["task_id"]: t["try_number"] for t in body["task_instances"]}


def test_trigger_from_the_form_then_clear_one_task(chromium, standalone, images, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    values = {
        "input_uri": str(images),
        "output_root": str(tmp_path / "out"),
        "model_root": str(tmp_path / "models"),
        "model_name": "browser-model",
        "epochs": "6",
        "num_workers": "1",
        "accuracy_gate": "0",
    }
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        _log_in(page, standalone)
        page.goto(f"{standalone.base}/dags/{DAG_ID}")
        page.get_by_role("button", name="Trigger").first.click()
        form = page.get_by_role("dialog")
        sections = {name: PARAMS[name]["section"] for name in values}
        for section in dict.fromkeys(sections.values()):  # one open at a time
            form.get_by_role("button", name=section, exact=True).click()
            for name in (n for n, s in sections.items() if s == section):
                field = form.locator(f"[name=element_{name}]")
                field.fill(values[name])
                field.blur()
        form.screenshot(path=str(tmp_path / "trigger-form.png"))
        KEPT.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "trigger-form.png", KEPT / "trigger-form.png")
        trigger = form.get_by_role("button", name="Trigger", exact=True)
        expect(trigger).to_be_enabled()  # the form accepts what it shows
        trigger.click()

        deadline = time.monotonic() + 60
        runs: list = []
        while not runs:
            assert time.monotonic() < deadline, standalone.tail()
            runs = standalone.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")[1]["dag_runs"]
            time.sleep(1)
        [run] = runs
        assert {k: run["conf"][k] for k in values} == {
            **values, "epochs": 6, "num_workers": 1, "accuracy_gate": 0,
        }  # fmt: skip
        run_id = run["dag_run_id"]
        assert standalone.wait_run(run_id) == "success", standalone.tail()
        assert sorted(p.name for p in (tmp_path / "models" / "browser-model").iterdir()) == [
            "1", "LATEST",
        ]  # fmt: skip
        before = _task_tries(standalone, run_id)

        # Clear `evaluate` alone, from its page, as a user reruns one stage.
        page.goto(f"{standalone.base}/dags/{DAG_ID}/runs/{run_id}/tasks/evaluate")
        page.get_by_role("button", name="Press shift+c to clear").click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_text("Affected Tasks: 3")).to_be_visible()  # with its downstream
        dialog.get_by_role("button", name="Downstream", exact=True).click()  # a toggle, on
        expect(dialog.get_by_text("Affected Tasks: 1")).to_be_visible()
        dialog.screenshot(path=str(tmp_path / "clear-dialog.png"))
        shutil.copy(tmp_path / "clear-dialog.png", KEPT / "clear-dialog.png")
        dialog.get_by_role("button", name="Confirm").click()
        expect(dialog).to_be_hidden()
        browser.close()

    deadline = time.monotonic() + 600
    while _task_tries(standalone, run_id)["evaluate"] == before["evaluate"]:
        assert time.monotonic() < deadline, standalone.tail()
        time.sleep(2)
    assert standalone.wait_run(run_id) == "success", standalone.tail()
    after = _task_tries(standalone, run_id)
    assert after["evaluate"] == before["evaluate"] + 1
    assert {k: v for k, v in after.items() if k != "evaluate"} == {
        k: v for k, v in before.items() if k != "evaluate"
    }  # nothing downstream (approve_publish, publish) or upstream ran again

    # The verdict is the run's note, on the run's page: published, and the first run of the
    # name had nothing to compare with.
    note = standalone.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")[1]["note"]
    assert note.startswith("**browser-model: published version 1**"), note
    assert "blessed without a comparison: nothing published at" in note
    # A clearly worse candidate (a learning rate that learns nothing) is not blessed: publish
    # is skipped, LATEST stays, the run succeeds and its page says why.
    worse = standalone.trigger({**run["conf"], "epochs": 1, "learning_rate": 1e-9})
    assert standalone.wait_run(worse) == "success", standalone.tail()
    _, publish = standalone.request(
        "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{worse}/taskInstances/publish"
    )
    assert publish["state"] == "skipped", publish
    models = tmp_path / "models" / "browser-model"
    assert (models / "LATEST").read_text() == "1\n"
    # As `make airflow` runs it (no schedule, unpaused): the runs are exactly those triggered.
    _, listed = standalone.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")
    assert sorted(r["dag_run_id"] for r in listed["dag_runs"]) == sorted([run_id, worse])
    assert {r["run_type"] for r in listed["dag_runs"]} == {"manual"}
    assert sorted(p.name for p in models.iterdir()) == ["1", "LATEST"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        _log_in(page, standalone)
        # The run page previews the note's first paragraph: the outcome and, if not
        # published, why.
        for shown_run, texts in (
            (run_id, ["browser-model: published version 1"]),
            (worse, ["browser-model: not published", "not blessed: accuracy"]),
        ):
            page.goto(f"{standalone.base}/dags/{DAG_ID}/runs/{shown_run}")
            for text in texts:
                expect(page.get_by_text(text).first).to_be_visible(timeout=30_000)
        page.screenshot(path=str(tmp_path / "run-note.png"))
        shutil.copy(tmp_path / "run-note.png", KEPT / "run-note.png")
        browser.close()

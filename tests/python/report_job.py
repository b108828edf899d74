"""syncctl report, end to end, run on every rank of a syncrun job of 2 nodes:

    syncrun -N 2 -n 4 -- python3 report_job.py [SCREENSHOT.png]

Every rank records 15 steps in a timeline (hvd.start_timeline; the last rank sleeps 20 ms before
each step). Rank 0 then runs `syncctl report` on the file and opens the page in headless Chromium
(Debian's chromium and chromedriver, through selenium), as a user would, and checks that it
renders: each of the five plots (the timeline's lanes, step time, per-rank lateness, time per
stage, top tensors by wait)
is an SVG drawn at a real size with its marks, the page loads nothing from outside itself, and the
stragglers table names the sleeping rank first. With SCREENSHOT, it saves the page as an image.
Every rank exits with rank 0's verdict.
"""
import os
import subprocess
import sys
import time

import torch

import syncd.torch as hvd
from timeline_job import load_when_complete  # beside this file

STEPS = 15


def check_page(page, screenshot):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,1000"):
        options.add_argument(arg)
    options.binary_location = "/usr/bin/chromium"
    # The browser is no part of syncd: under the sanitizer suite it runs without the preloaded runtime.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver", env=env), options=options)
    try:
        driver.get("file://" + os.path.abspath(page))
        assert driver.title.startswith("syncd timeline report"), driver.title
        for fig in ("timeline", "step-time", "lateness", "stages", "top-wait"):
            box = driver.execute_script(
                "const s = document.querySelector('#%s svg'); if (!s) return null;"
                "const r = s.getBoundingClientRect();"
                "return [r.width, r.height, s.querySelectorAll('path, rect, use, image').length];" % fig)
            assert box is not None, "plot %s: no SVG on the page" % fig
            width, height, marks = box
            assert width > 300 and height > 100, "plot %s drawn at %.0f x %.0f px" % (fig, width, height)
            assert marks > 10, "plot %s has %d marks" % (fig, marks)
            print("plot %-10s %4.0f x %3.0f px, %4d marks" % (fig, width, height, marks), flush=True)
        outside = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith('file:'));")
        assert not outside, "the page loads %s" % outside
        first = driver.execute_script("return document.querySelector('#stragglers tr:nth-child(2) td').textContent;")
        table = driver.execute_script("return document.querySelector('#stragglers').innerText;")
        assert first.strip() == str(hvd.size() - 1), "the stragglers table names rank %s first:\n%s" % (first, table)
        if screenshot:
            height = driver.execute_script("return document.body.scrollHeight;")
            driver.set_window_size(1200, height + 100)
            driver.save_screenshot(screenshot)
    finally:
        driver.quit()


def main():
    screenshot = sys.argv[1] if len(sys.argv) > 1 else ""
    out_dir = os.path.dirname(os.environ["SYNCD_RUN_DIR"])  # syncrun's job directory, shared by every rank
    trace = os.path.join(out_dir, "report_trace.json")
    hvd.init()
    hvd.start_timeline(trace)
    hvd.barrier()
    for step in range(STEPS):
        if hvd.rank() == hvd.size() - 1:
            time.sleep(0.02)
        hs = [hvd.allreduce_async(torch.ones(2000 * (k + 1)), name="report.layer%d" % k) for k in range(4)]
        for h in hs:
            hvd.synchronize(h)
    hvd.barrier()
    hvd.stop_timeline()
    ok = 1
    if hvd.rank() == 0:
        try:
            load_when_complete(trace)
            page = os.path.join(out_dir, "report.html")
            syncctl = os.path.join(os.environ["SYNCD_BIN_DIR"], "syncctl")
            subprocess.run([syncctl, "report", trace, "-o", page], check=True)
            check_page(page, screenshot)
        except Exception as e:  # noqa: BLE001 (any failure is the verdict)
            print("report check failed: %r" % e, file=sys.stderr, flush=True)
            ok = 0
    ok = int(hvd.allreduce(torch.tensor([ok]), op=hvd.Min, name="report.verdict").item())
    hvd.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

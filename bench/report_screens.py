"""Full-page screenshots of ``OUT/report.html`` in headless Chromium, and the page's height.

Why: the report is read in a browser, so its layout (chart widths, how tall the page runs) is judged
on a real rendering, not on the HTML. Chromium needs a window as tall as the page to shoot all of it,
so the height is measured first: a copy of the page with a one-line script that writes
``scrollHeight`` into the title is loaded with ``--dump-dom``; the page itself stays script-free.

    apt-get install -y chromium
    .venv/bin/python bench/report_screens.py OUT/report.html /tmp/report.png [--width 1280]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from pathlib import Path

CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
MEASURE = "<script>document.title = 'height=' + document.documentElement.scrollHeight</script>"


def page_height(page: Path, width: int) -> int:
    """The rendered page's height in CSS pixels at ``width``."""
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "measure.html"
        copy.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
        dom = subprocess.run(
            [*CHROMIUM, f"--window-size={width},1000", "--dump-dom", copy.as_uri()], capture_output=True, text=True, check=True
        ).stdout
    found = re.search(r"<title>height=(\d+)</title>", dom)
    if not found:
        raise RuntimeError(f"Chromium did not report the height of {page}")
    return int(found[1])


def screenshot(page: Path, png: Path, width: int) -> int:
    """Shoot the whole page into ``png``; return its height."""
    height = page_height(page, width)
    subprocess.run(
        [*CHROMIUM, f"--window-size={width},{height}", f"--screenshot={png.resolve()}", page.resolve().as_uri()],
        capture_output=True,
        check=True,
    )
    return height


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="a report.html")
    parser.add_argument("png", type=Path, help="where the screenshot goes")
    parser.add_argument("--width", type=int, default=1280, help="browser window width in CSS pixels")
    args = parser.parse_args()
    height = screenshot(args.page, args.png, args.width)
    print(f"{args.page}: {height:,} px tall at {args.width} px wide -> {args.png}")


if __name__ == "__main__":
    main()

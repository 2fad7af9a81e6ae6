#!/usr/bin/env bash
# docs/report.png from a finished run's report page (make screenshot, after make tiny), and
# docs/report.png.json: which report code and commit it shows, so a test can tell when it is stale.
#   docs/screenshot.sh [results/tiny/report]
set -euo pipefail
cd "$(dirname "$0")/.."
report_dir=${1:-results/tiny/report}
python=${PYTHON:-.venv/bin/python}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
    echo "screenshot: needs a headless Chromium: sudo apt-get install chromium" >&2
    exit 2
fi
# --no-sandbox: Chromium refuses to run as root with its own sandbox; the page is our own file.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
    --window-size=1400,2600 --screenshot=docs/report.png "file://$(realpath "$report_dir/report.html")" 2>/dev/null
"$python" - "$report_dir" <<'PY'
import json, sys
from pathlib import Path
from stages.report import report_code_digest
manifest = json.loads((Path(sys.argv[1]) / "manifest.json").read_text())
stamp = {"report_code": report_code_digest(), "report": sys.argv[1], "code_version": manifest["code_version"]}
Path("docs/report.png.json").write_text(json.dumps(stamp, indent=2) + "\n")
PY
echo "docs/report.png and docs/report.png.json from $report_dir"

#!/usr/bin/env bash
# Every row of `syncd --config-markdown` must appear verbatim on the configuration page
# (docs/pages/configuration.md), and the page's table must have no rows the daemon does not know.
set -euo pipefail
syncd=$1 page=$2
table=$("$syncd" --config-markdown)
status=0
while IFS= read -r row; do
  grep -qxF -- "$row" "$page" || { echo "$page lacks: $row" >&2; status=1; }
done <<<"$table"
page_rows=$(grep -E '^\| `--[a-z-]+` \| `SYNCD_' "$page" || true)
while IFS= read -r row; do
  [ -z "$row" ] && continue
  grep -qxF -- "$row" <<<"$table" || { echo "$page has a row syncd does not know: $row" >&2; status=1; }
done <<<"$page_rows"
[ $status -eq 0 ] && echo "OK: the configuration page's table matches syncd --config-markdown"
exit $status

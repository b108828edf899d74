#!/usr/bin/env bash
# Every row of `syncd --config-markdown` must appear verbatim in README.md, and the README's
# table must have no rows the daemon does not know.
set -euo pipefail
syncd=$1 readme=$2
table=$("$syncd" --config-markdown)
status=0
while IFS= read -r row; do
  grep -qxF -- "$row" "$readme" || { echo "README.md lacks: $row" >&2; status=1; }
done <<<"$table"
readme_rows=$(grep -E '^\| `--[a-z-]+` \| `SYNCD_' "$readme" || true)
while IFS= read -r row; do
  [ -z "$row" ] && continue
  grep -qxF -- "$row" <<<"$table" || { echo "README.md has a row syncd does not know: $row" >&2; status=1; }
done <<<"$readme_rows"
[ $status -eq 0 ] && echo "OK: README configuration table matches syncd --config-markdown"
exit $status

#!/usr/bin/env python3
"""The documentation site builds in strict mode and none of its links is broken.

    site_test.py ROOT OUT     build ROOT/docs/mkdocs.yml into OUT, then check it

1. `mkdocs build --strict`: a page of the nav that does not exist, a link to a missing page or
   image, fails the build (mkdocs 1.4 checks pages, not anchors).
2. Every link of the built site to one of its pages, with or without an anchor, lands on an
   element with that id (an anchor that no heading makes is caught here).
3. README.md read in the repository: every relative link names a file that exists, and an anchor
   names a heading of that file (GitHub's slugs).
"""
import html.parser
import os
import re
import subprocess
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "img" and a.get("src"):
            self.links.append(a["src"])


def site_problems(out):
    pages = {}
    for dirpath, _, files in os.walk(out):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(dirpath, name)
                p = Page()
                with open(path, encoding="utf-8") as f:
                    p.feed(f.read())
                pages[os.path.relpath(path, out)] = p
    problems = []
    for rel, page in sorted(pages.items()):
        if rel in ("404.html", "search.html") or rel.startswith("search/"):
            continue
        for href in page.links:
            parsed = urllib.parse.urlparse(href)
            if parsed.scheme or parsed.netloc or href.startswith("mailto:"):
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(rel), urllib.parse.unquote(parsed.path))) if parsed.path else rel
            if not os.path.exists(os.path.join(out, target)):
                problems.append(f"{rel}: link to {href}: no such file in the site")
                continue
            if parsed.fragment and target.endswith(".html"):
                if parsed.fragment not in pages[target].ids:
                    problems.append(f"{rel}: link to {href}: {target} has no anchor '{parsed.fragment}'")
    return problems, len(pages)


def github_slug(title):
    title = re.sub(r"`", "", title).strip().lower()
    return re.sub(r"[^\w\- ]", "", title).replace(" ", "-")


def headings(path):
    slugs, fence = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            elif not fence and re.match(r"#+ ", line):
                slugs.add(github_slug(line.split(" ", 1)[1]))
    return slugs


def readme_problems(root):
    problems = []
    readme = os.path.join(root, "README.md")
    with open(readme, encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        parsed = urllib.parse.urlparse(target)
        if parsed.scheme:
            continue
        path = os.path.join(root, parsed.path) if parsed.path else readme
        if not os.path.exists(path):
            problems.append(f"README.md: link to {target}: no such file")
        elif parsed.fragment and parsed.fragment not in headings(path):
            problems.append(f"README.md: link to {target}: no heading '{parsed.fragment}' there")
    return problems


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, out = sys.argv[1:]
    build = subprocess.run(["mkdocs", "build", "--strict", "-f", os.path.join(root, "docs", "mkdocs.yml"),
                            "-d", os.path.abspath(out)], capture_output=True, text=True)
    if build.returncode != 0:
        print("mkdocs build --strict failed:\n" + build.stdout + build.stderr, file=sys.stderr)
        return 1
    problems, count = site_problems(out)
    problems += readme_problems(root)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print(f"OK: {count} pages built strict, every link and anchor of the site and README.md lands")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""mkdocs hook (docs/mkdocs.yml): the home page is the repository's README.md, and the design pages
are daemon/README.md and client/README.md (symlinks in pages/, so each text has one home). Their
links are written for a reader of the repository; on the site they point at the pages instead."""

REPOSITORY_LINKS = {
    "](docs/pages/": "](",
    "](daemon/README.md)": "](design-daemon.md)",
    "](client/README.md)": "](design-client.md)",
}




# The C API reference (c-api-reference.md) is the public header itself, rendered where the page
# says <!-- client.h -->: each declaration block with the comment above it, and the status codes
# as a table, so the reference cannot drift from the header.
HEADER = "../../proto/include/syncd/client.h"
MARKER = "<!-- client.h -->"


def comment_text(lines):
    text = " ".join(line.strip() for line in lines)
    text = text.replace("/*", "").replace("*/", "")
    text = " ".join(word for word in text.split() if word != "*")
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("|", "&#124;")  # prose, not markup


def status_table(header):
    body = header.split("typedef enum syncd_status", 1)[1].split("} syncd_status;", 1)[0]
    rows, name, words = [], None, []
    for line in body.splitlines()[1:]:
        code = line.split("/*", 1)[0].strip()
        if code.startswith("SYNCD_"):
            if name:
                rows.append((name, value, comment_text(words)))
            name, value = [part.strip(" ,") for part in code.split("=")]
            words = [line.split("/*", 1)[1]] if "/*" in line else []
        elif line.strip():
            words.append(line)
    rows.append((name, value, comment_text(words)))
    return "\n".join(["| status | value | meaning |", "|---|---|---|"] +
                     ["| `%s` | %s | %s |" % row for row in rows])


def header_reference(header):
    body = header.split('#define SYNCD_API __attribute__((visibility("default")))', 1)[1]
    body = body.rsplit("#ifdef __cplusplus", 1)[0]
    out = []
    for chunk in body.split("\n\n"):
        lines = [line for line in chunk.splitlines() if line.strip()]
        prose = []
        if lines and lines[0].lstrip().startswith("/*"):  # the comment above the declarations
            while lines:
                prose.append(lines.pop(0))
                if "*/" in prose[-1]:
                    break
        if not lines or all(line.startswith("#") and "define SYNCD_MAX" not in line for line in lines):
            continue  # the C++ glue, and what it says of itself
        if prose:
            out.append(comment_text(prose) + "\n")
        if lines:
            out.append("```c\n" + "\n".join(lines) + "\n```\n")
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_path == "index.md":
        for theirs, ours in REPOSITORY_LINKS.items():
            markdown = markdown.replace(theirs, ours)
    if MARKER in markdown:
        import os
        with open(os.path.join(config["docs_dir"], HEADER)) as f:
            header = f.read()
        markdown = markdown.replace(MARKER, "## Status codes\n\n" + status_table(header) +
                                    "\n\n## The header, declaration by declaration\n\n" + header_reference(header))
    return markdown

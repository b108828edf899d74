"""mkdocs hook (docs/mkdocs.yml): the home page is the repository's README.md, and the design pages
are daemon/README.md and client/README.md (symlinks in pages/, so each text has one home). Their
links are written for a reader of the repository; on the site they point at the pages instead."""

REPOSITORY_LINKS = {
    "](docs/pages/": "](",
    "](daemon/README.md)": "](design-daemon.md)",
    "](client/README.md)": "](design-client.md)",
}


def on_page_markdown(markdown, page, config, files):
    if page.file.src_path == "index.md":
        for theirs, ours in REPOSITORY_LINKS.items():
            markdown = markdown.replace(theirs, ours)
    return markdown

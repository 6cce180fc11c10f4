"""Sphinx extension: the line at the top of every executed chapter saying where its numbers come from.

Machine, date and commit come from the stamp the pipeline wrote into the executed notebook; whether the
chapter's source changed since is decided now, at build time, against ``notebooks/NAME.py``
(:func:`systems.pipeline.run_info`), so the line stays true when the source moves on and the run does not.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes

from systems import pipeline

PREFIX = "book/executed/"


def _inline(markdown: str) -> list[nodes.Node]:
    """The line's Markdown (text and `code` spans only) as docutils nodes."""
    parts = re.split(r"(`[^`]+`)", markdown)
    return [nodes.literal(text=p[1:-1], classes=["commit"]) if p.startswith("`") else nodes.Text(p)
            for p in parts if p]


def add_banner(app, doctree) -> None:
    docname = app.env.docname
    if not docname.startswith(PREFIX):
        return
    line = pipeline.provenance_line(pipeline.run_info(docname.removeprefix(PREFIX)))
    banner = nodes.container(classes=["provenance"])
    banner += nodes.paragraph("", "", *_inline(line))
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None or not isinstance(section[0], nodes.title):
        raise ValueError(f"{docname}: an executed chapter must start with a title")
    section.insert(1, banner)


def every_chapter_outdated(app, env, added, changed, removed) -> list[str]:
    """Every executed chapter, read again on every build: its banner depends on ``notebooks/NAME.py`` and the
    history, which Sphinx does not track, so a chapter whose executed notebook did not change would keep the
    banner of the build before (saying its source had not changed after it had)."""
    return sorted(doc for doc in env.found_docs if doc.startswith(PREFIX))


def _static_path(app) -> None:
    app.config.html_static_path.append(str(Path(__file__).parent / "static"))


def _unique_scripts(app, pagename, templatename, context, doctree) -> None:
    # sphinx-thebe registers its inline configuration once per read of the documents, and Jupyter Book reads
    # them twice: the page then declares the same constants twice and the browser reports a SyntaxError.
    # (the copies differ only in a filename of None against "", both meaning an inline script)
    unique = {}
    for script in context.get("script_files", []):
        unique.setdefault((script.filename or "", tuple(sorted(script.attributes.items()))), script)
    context["script_files"] = list(unique.values())


def setup(app):
    app.connect("doctree-read", add_banner)
    app.connect("env-get-outdated", every_chapter_outdated)
    app.connect("builder-inited", _static_path)
    app.connect("html-page-context", _unique_scripts, priority=900)
    app.add_css_file("book.css")
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every relative link in the documentation resolves: README.md, HACKING.md and
docs/*.md, each [text](target) and ![alt](target) outside code, to a file or directory
of the tree and, with a #fragment into a Markdown file, to one of its headings (as
GitHub makes their anchors).  Links to other sites are not fetched.  docs/README.md,
the index, must link every page of docs/.
Usage: check-doc-links.py [TOP]"""
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(path):
    """(line number, text) outside fenced code blocks, inline code spans removed."""
    inside = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                yield n, re.sub(r"`[^`]*`", "", line)


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped
    (letters, digits, '-', '_' and spaces kept), spaces made '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        inside = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    inside = not inside
                    continue
                m = None if inside else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    s = slug(m.group(1))
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    found.add(s if n == 0 else f"{s}-{n}")
        cache[path] = found
    return cache[path]


def main():
    top = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                          os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    pages = [os.path.join(top, p) for p in ("README.md", "HACKING.md")]
    docs = os.path.join(top, "docs")
    pages += sorted(os.path.join(docs, p) for p in os.listdir(docs) if p.endswith(".md"))
    bad = []
    checked = 0
    index = os.path.join(docs, "README.md")
    linked = set()
    for page in pages:
        if not os.path.exists(page):
            continue
        for n, line in prose_lines(page):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                    continue
                checked += 1
                where = f"{os.path.relpath(page, top)}:{n}: {target}"
                path, _, fragment = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                if page == index:
                    linked.add(dest)
                if os.path.commonpath([top, dest]) != top:
                    # it may resolve here, never in a tarball or a reader's checkout
                    bad.append(f"{where}: leaves the source tree")
                elif not os.path.exists(dest):
                    bad.append(f"{where}: no such file")
                elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
                    bad.append(f"{where}: no heading #{fragment} in {os.path.relpath(dest, top)}")
    for page in pages:
        if os.path.dirname(page) == docs and page != index and page not in linked:
            bad.append(f"docs/README.md: the index lacks {os.path.relpath(page, top)}")
    if bad:
        print("check-doc-links: links that do not resolve, or pages the index lacks:")
        for b in bad:
            print("  " + b)
        return 1
    print(f"check-doc-links: {checked} links in {len(pages)} pages resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())

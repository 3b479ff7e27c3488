#!/usr/bin/env python3
"""check_docs.py: the user documentation against itself and against the tool.

Checks, over README.md, CONTRIBUTING.md, CHANGELOG.md, docs/*.md,
examples/**/*.md and traces/FORMAT.md:
  - every relative link resolves: the file (or folder) exists in the
    repository, and an anchor (#name) names a heading of the Markdown file
    it points into, by GitHub's rule (lowercase, punctuation dropped, spaces
    to '-', '-1', '-2' for repeats) or an explicit <a id="..."> / name;
  - README.md links every page of docs/;
  - the tables of the tool are documented: every option `rdmasan run
    --help=1` lists appears in docs/options.md as `name`, every check id of
    `rdmasan checks` is a heading of docs/checks.md, every command of
    `rdmasan help` appears in docs/options.md and in README.md, and every
    flag of `rdmasan fuzz --help` appears in docs/fuzzing.md.
It may not: fetch anything (links to http(s) and mailto are not followed),
or judge prose.  Prints one line per problem and exits 1 if there is any.

usage: check_docs.py REPO RDMASAN
"""
import os
import re
import subprocess
import sys


def slug(text):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)                     # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)                    # \w keeps letters, digits, _
    return text.replace(" ", "-")


def strip_code(lines):
    """The lines outside fenced code blocks, with inline code spans blanked."""
    out, fence = [], None
    for number, line in enumerate(lines, 1):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif line.strip().startswith(fence):
                fence = None
            continue
        if fence is None:
            out.append((number, re.sub(r"`+[^`]*`+", "``", line)))
    return out


class Page:
    def __init__(self, path):
        self.path = path
        with open(path, encoding="utf-8") as f:
            self.lines = f.read().splitlines()
        self.text_lines = strip_code(self.lines)
        self.anchors = set()
        seen = {}
        for _, line in self.text_lines:
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                # Headings keep their code spans' text for the slug.
                raw = self.lines[_ - 1]
                heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", raw).group(1)
                base = slug(heading)
                n = seen.get(base, 0)
                self.anchors.add(base if n == 0 else f"{base}-{n}")
                seen[base] = n + 1
            for a in re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line):
                self.anchors.add(a)

    def links(self):
        for number, line in self.text_lines:
            for target in re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line):
                yield number, target
            for target in re.findall(r"^\s*\[[^\]]+\]:\s+(\S+)", line):  # reference definitions
                yield number, target


def doc_files(repo):
    files = []
    for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "traces/FORMAT.md"):
        if os.path.exists(os.path.join(repo, name)):
            files.append(name)
    for top in ("docs", "examples"):
        for root, dirs, names in os.walk(os.path.join(repo, top)):
            dirs.sort()
            for n in sorted(names):
                if n.endswith(".md"):
                    files.append(os.path.relpath(os.path.join(root, n), repo))
    return files


def run(cmd):
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    return done.stdout


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    repo, rdmasan = os.path.abspath(sys.argv[1]), sys.argv[2]
    problems = []
    pages = {}

    def page(rel):
        if rel not in pages:
            pages[rel] = Page(os.path.join(repo, rel))
        return pages[rel]

    files = doc_files(repo)
    for rel in files:
        for number, target in page(rel).links():
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            if path:
                resolved = os.path.normpath(os.path.join(os.path.dirname(rel), path))
                if resolved.startswith(".."):
                    problems.append(f"{rel}:{number}: link '{target}' leaves the repository")
                    continue
                if not os.path.exists(os.path.join(repo, resolved)):
                    problems.append(f"{rel}:{number}: link '{target}': {resolved} does not exist")
                    continue
            else:
                resolved = rel
            if anchor:
                if not resolved.endswith(".md") or os.path.isdir(os.path.join(repo, resolved)):
                    problems.append(f"{rel}:{number}: link '{target}': an anchor into a file that is not Markdown")
                elif anchor not in page(resolved).anchors:
                    problems.append(f"{rel}:{number}: link '{target}': no heading '#{anchor}' in {resolved}")

    # Every page is reachable: README links each page of docs/.
    readme_targets = {os.path.normpath(t.partition("#")[0]) for _, t in page("README.md").links()}
    for rel in files:
        if rel.startswith("docs/") and rel not in readme_targets:
            problems.append(f"README.md: no link to {rel}")

    def text_of(rel):
        return "\n".join(page(rel).lines) if os.path.exists(os.path.join(repo, rel)) else ""

    options = re.findall(r"^  ([a-z_]+)\s+(?:string|int|bool|double|float|uint)", run([rdmasan, "run", "--help=1"]),
                         re.M)
    if len(options) < 10:
        problems.append(f"could not read the option table from '{rdmasan} run --help=1'")
    options_md = text_of("docs/options.md")
    for o in options:
        if f"`{o}`" not in options_md:
            problems.append(f"docs/options.md: option `{o}` is not documented")

    checks = re.findall(r"^([a-z][a-z0-9-]+)\s+(?:ERROR|WARNING)\s", run([rdmasan, "checks"]), re.M)
    if len(checks) < 10:
        problems.append(f"could not read the check table from '{rdmasan} checks'")
    check_anchors = page("docs/checks.md").anchors if os.path.exists(os.path.join(repo, "docs/checks.md")) else set()
    for c in checks:
        if c not in check_anchors:
            problems.append(f"docs/checks.md: check `{c}` has no heading of its own")

    commands = re.findall(r"^  ([a-z]+)\b", run([rdmasan, "help"]).split("\noptions:")[0], re.M)
    if len(commands) < 5:
        problems.append(f"could not read the commands from '{rdmasan} help'")
    readme = text_of("README.md")
    for c in commands:
        for rel, text in (("docs/options.md", options_md), ("README.md", readme)):
            if not re.search(rf"rdmasan {c}\b", text):
                problems.append(f"{rel}: command `rdmasan {c}` is not mentioned")

    fuzz_help = run([rdmasan, "fuzz", "--help"])
    flags = sorted(set(re.findall(r"\[(--[a-z_]+)=", fuzz_help.split("\n\n")[0])) - {"--name"})
    if len(flags) < 5:
        problems.append(f"could not read the fuzz flags from '{rdmasan} fuzz --help'")
    fuzzing_md = text_of("docs/fuzzing.md")
    for fl in flags:
        if fl not in fuzzing_md:
            problems.append(f"docs/fuzzing.md: fuzz flag {fl} is not documented")

    for p in problems:
        print(f"check_docs: {p}")
    print(f"check_docs: {len(files)} pages, {sum(1 for r in files for _ in page(r).links())} links, "
          f"{len(options)} options, {len(checks)} checks, {len(commands)} commands, {len(flags)} fuzz flags: "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""check_docs.py: the user documentation against itself and against the tool.

Checks, over README.md, CONTRIBUTING.md, CHANGELOG.md, docs/*.md,
examples/**/*.md and traces/FORMAT.md:
  - every relative link resolves: the file (or folder) exists in the
    repository, and an anchor (#name) names a heading of the Markdown file
    it points into, by GitHub's rule (lowercase, punctuation dropped, spaces
    to '-', '-1', '-2' for repeats) or an explicit <a id="..."> / name;
  - README.md links every page of docs/ (docs/*.md), and docs/checks.md
    links every family page of docs/checks/;
  - the tables of the tool are documented: every option `rdmasan run
    --help=1` lists appears in docs/options.md as `name`; every check id of
    `rdmasan checks` is a `## id` heading of exactly one family page
    docs/checks/<family>.md and has a row in the index docs/checks.md that
    links that section and keeps an <a id="id"> anchor (so links to
    docs/checks.md#id written before the split still land), and every `## `
    heading of a family page is a check the tool lists; every command of
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


def check_pages(repo, files, page, checks):
    """The check index docs/checks.md and the family pages docs/checks/*.md
    against the ids `rdmasan checks` lists."""
    problems = []
    family_pages = [rel for rel in files if re.match(r"^docs/checks/[^/]+\.md$", rel)]
    if not family_pages:
        return ["docs/checks/: no family page"]
    home = {}  # check id -> the family pages with a `## id` heading
    for rel in family_pages:
        for number, line in page(rel).text_lines:
            m = re.match(r"^##\s+(.*?)\s*$", page(rel).lines[number - 1])
            if not m:
                continue
            heading = m.group(1).strip("`")
            home.setdefault(heading, []).append(rel)
            if heading not in checks:
                problems.append(f"{rel}:{number}: section '{heading}' is not a check `rdmasan checks` lists")
    index = "docs/checks.md"
    if not os.path.exists(os.path.join(repo, index)):
        return problems + [f"{index}: missing (the check index)"]
    rows = {}  # check id -> (line number, the section it links)
    for number, line in enumerate(page(index).lines, 1):
        m = re.match(r"^\|\s*(?:<a\s+id=\"[^\"]*\"></a>)?\[`([a-z0-9-]+)`\]\(([^)]+)\)\s*\|", line)
        if m:
            rows[m.group(1)] = (number, m.group(2))
    for c in checks:
        pages_of_c = home.get(c, [])
        if not pages_of_c:
            problems.append(f"docs/checks/: check `{c}` has no `## {c}` section in a family page")
        elif len(pages_of_c) > 1:
            problems.append(f"docs/checks/: check `{c}` has a section in more than one page: {', '.join(pages_of_c)}")
        if c not in rows:
            problems.append(f"{index}: check `{c}` has no row in the index")
            continue
        number, target = rows[c]
        want = f"checks/{os.path.basename(pages_of_c[0])}#{c}" if pages_of_c else None
        if want and target != want:
            problems.append(f"{index}:{number}: the row of `{c}` links '{target}', not its section '{want}'")
        if c not in page(index).anchors:
            problems.append(f"{index}:{number}: the row of `{c}` keeps no <a id=\"{c}\"> anchor for older links")
    for c in rows:
        if c not in checks:
            problems.append(f"{index}:{rows[c][0]}: row for `{c}`, a check `rdmasan checks` does not list")
    return problems


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
    # docs/checks.md links each family page of docs/checks/.
    def targets_of(rel):
        return {os.path.normpath(os.path.join(os.path.dirname(rel), t.partition("#")[0]))
                for _, t in page(rel).links() if t.partition("#")[0]}

    readme_targets = targets_of("README.md")
    index_targets = targets_of("docs/checks.md") if os.path.exists(os.path.join(repo, "docs/checks.md")) else set()
    for rel in files:
        if re.match(r"^docs/[^/]+\.md$", rel) and rel not in readme_targets:
            problems.append(f"README.md: no link to {rel}")
        elif re.match(r"^docs/checks/[^/]+\.md$", rel) and rel not in index_targets:
            problems.append(f"docs/checks.md: no link to {rel}")

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
    problems += check_pages(repo, files, page, checks)

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

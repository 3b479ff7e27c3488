#!/usr/bin/python3
# pyverbs_runner.py: rdma-core's own verbs test suite (pyverbs), run under
# `rdmasan run` on softnic, compared with the outcomes this repository
# expects (tests/conformance/pyverbs_expected.txt).
#
# What it does: copies the suite out of the python3-pyverbs package (its
# modules ship gzipped), lists its tests, runs each test in a process of
# its own under rdmasan on a softnic fabric of its own (so a crash, a hang
# or a finding belongs to exactly one test, and tests run in parallel
# without meeting), records the outcome unittest gave and the findings
# rdmasan reported, classifies each skip by its message, and compares all
# of it with the expected-outcomes file.  It fails on any difference: a
# test that passes where a skip was expected fails too, so the file is
# kept current as softnic grows.  It prints the conformance table
# (docs/conformance.md's) and writes it, with every test's outcome, under --work.
#
# What it may not do: change the suite, retry a test, or accept an outcome
# the file does not name.  A skip is accepted only with the category the
# file gives it, and the category is derived from the suite's own skip
# message (CATEGORIES below), never from the file.
import argparse
import collections
import concurrent.futures
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"  # Debian's: the interpreter python3-pyverbs is built for
SUITE_SOURCE = "/usr/share/doc/rdma-core/tests"

# Skip categories, from the suite's skip message.  The first four name
# hardware softnic cannot be; a skip for any other reason is something
# softnic lacks ("softnic"), and counts against conformance.
HARDWARE = ("vendor", "gpu", "dmabuf", "hugepages")
CATEGORIES = [
    ("gpu", re.compile(r"cuda|CUDA|GPU|gpu")),
    ("dmabuf", re.compile(r"dmabuf|DMABUF|dma-buf|DmaBuf")),
    ("hugepages", re.compile(r"[Hh]uge ?pages?")),
    ("vendor", re.compile(r"mlx5|MLX5|[Mm]ellanox|EFA|efa|DevX|DEVX|DV |vendor|[Vv]fio|VFIO|"
                          r"ConnectX|Crypto|crypto|DCT|DC ")),
]
# A test of the other link layer (an InfiniBand-only test on the RoCE
# port, a RoCE-only one on the InfiniBand port), where the other port's
# expected-outcomes file (--other-expected) says it passes; a link-layer
# skip of a test that does not pass there is something softnic lacks.
LINK_LAYER = re.compile(r"[Ll]ink layer|Ethernet link layer|RoCE test|InfiniBand")
CATEGORY_WORDS = HARDWARE + ("link-layer", "softnic")

FINDING = re.compile(r"^==\d+==(ERROR|WARNING): rdmasan: ([a-z0-9-]+): (.*)$")


# Modules of the suite that test one vendor's device (its direct-verbs
# library) whatever their skip message says.
VENDOR_MODULE = re.compile(r"^test_(mlx5|efa)")


def categorize_skip(message, test_id="", passes_on_other_port=frozenset()):
    if VENDOR_MODULE.match(test_id):
        return "vendor"
    for name, pattern in CATEGORIES:
        if pattern.search(message):
            return name
    if LINK_LAYER.search(message) and test_id in passes_on_other_port:
        return "link-layer"
    return "softnic"


def prepare_suite(source, dest):
    """A runnable copy of the suite: the package ships most modules gzipped."""
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    for name in sorted(os.listdir(source)):
        path = os.path.join(source, name)
        if name.endswith(".gz"):
            with gzip.open(path, "rb") as src, open(os.path.join(dest, name[:-3]), "wb") as dst:
                shutil.copyfileobj(src, dst)
        elif os.path.isfile(path):
            shutil.copy(path, os.path.join(dest, name))
    return dest


def list_tests(suite):
    out = subprocess.run([PYTHON, os.path.join(HERE, "pyverbs_child.py"), suite, "--list"],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"pyverbs_runner: cannot list the suite's tests:\n{out.stderr}")
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def read_findings(log_dir):
    """(check id, first line) of every report rdmasan wrote, in order."""
    found = []
    if not os.path.isdir(log_dir):
        return found
    for name in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                m = FINDING.match(line.rstrip("\n"))
                if m:
                    found.append((m.group(2), m.group(3)))
    return found


def run_one(args, suite, index, test_id):
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", test_id)
    log_dir = os.path.join(args.work, "logs", safe)
    os.makedirs(log_dir, exist_ok=True)
    result_file = os.path.join(log_dir, "result.jsonl")
    report_dir = os.path.join(log_dir, "rdmasan")
    os.makedirs(report_dir, exist_ok=True)
    # As users type it (softnic=auto), unless --softnic says otherwise.
    mode = [f"--softnic={args.softnic}"] if args.softnic else []
    cmd = [args.rdmasan, "run", *mode, f"--softnic_port={args.port}",
           f"--softnic_fabric=conf{os.getpid()}x{index}",
           f"--log_path={report_dir}/report", "--", PYTHON, os.path.join(HERE, "pyverbs_child.py"),
           suite, result_file, test_id]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                              cwd=log_dir, check=False)
        rc, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, output = "timeout", (exc.stdout or b"").decode(errors="replace") if isinstance(
            exc.stdout, bytes) else (exc.stdout or "")
    elapsed = time.monotonic() - start
    with open(os.path.join(log_dir, "output.txt"), "w", encoding="utf-8") as f:
        f.write(output)
    records = []
    if os.path.exists(result_file):
        with open(result_file, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
    mine = [r for r in records if r["id"].removeprefix("tests.") == test_id]
    if rc == "timeout":
        outcome, detail = "error", f"timed out after {args.timeout} s"
    elif not mine:
        outcome, detail = "error", f"no outcome recorded (exit status {rc}); see {log_dir}/output.txt"
    else:
        # A test with a failing subtest and a pass is a failure.
        rank = {"error": 0, "fail": 1, "xpass": 2, "skip": 3, "xfail": 4, "pass": 5}
        worst = min(mine, key=lambda r: rank.get(r["outcome"], 0))
        outcome, detail = worst["outcome"], worst["detail"]
    return {"id": test_id, "outcome": outcome, "detail": detail,
            "category": categorize_skip(detail, test_id, args.other_passes) if outcome == "skip" else "",
            "findings": read_findings(report_dir), "seconds": round(elapsed, 2), "rc": rc}


class Expected:
    def __init__(self, path):
        self.outcomes = {}   # id -> (outcome, category, note)
        self.findings = {}   # (id, check) -> classification
        self.errors = []
        with open(path, encoding="utf-8") as f:
            for n, raw in enumerate(f, 1):
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                words = line.split(None, 3)
                if words[0] == "finding":
                    if len(words) < 4:
                        self.errors.append(f"{path}:{n}: 'finding TEST CHECK CLASSIFICATION' expected")
                        continue
                    self.findings[(words[1], words[2])] = words[3]
                    continue
                test_id, outcome = words[0], words[1] if len(words) > 1 else ""
                if outcome == "pass" and len(words) == 2:
                    self.outcomes[test_id] = ("pass", "", "")
                elif outcome == "skip" and len(words) >= 3 and words[2].rstrip(":") in CATEGORY_WORDS:
                    self.outcomes[test_id] = ("skip", words[2].rstrip(":"), " ".join(words[3:]))
                else:
                    self.errors.append(f"{path}:{n}: 'TEST pass' or 'TEST skip CATEGORY [note]' expected "
                                       f"(categories: {', '.join(CATEGORY_WORDS)}): {raw.strip()}")


def write_expected(path, results):
    """The file a reviewer edits: today's outcomes, findings left to classify."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("# generated by pyverbs_runner.py --write-expected; classify every finding\n")
        for r in results:
            if r["outcome"] == "pass":
                f.write(f"{r['id']} pass\n")
            elif r["outcome"] == "skip":
                f.write(f"{r['id']} skip {r['category']}: {r['detail']}\n")
            else:
                f.write(f"# {r['id']} {r['outcome']}: {r['detail']}\n")
        for r in results:
            for check in sorted({c for c, _ in r["findings"]}):
                f.write(f"finding {r['id']} {check} UNCLASSIFIED\n")


def table(results, expected):
    by = collections.Counter()
    reasons = collections.Counter()
    for r in results:
        exp = expected.outcomes.get(r["id"], ("", "", ""))
        hardware = (r["outcome"] == "skip" and r["category"] in HARDWARE) or exp[1] in HARDWARE
        scope = "hardware" if hardware else "generic"
        by[(scope, r["outcome"])] += 1
        if r["outcome"] == "skip":
            note = exp[2] if exp[1] == r["category"] and exp[2] else r["detail"]
            reasons[(scope, r["category"], note[:90])] += 1
    generic = sum(v for (s, _), v in by.items() if s == "generic")
    hw = sum(v for (s, _), v in by.items() if s == "hardware")
    lines = [f"| tests | pass | skip | fail/error |", "|---|---|---|---|"]
    for scope, total in (("generic", generic), ("hardware", hw)):
        bad = by[(scope, "fail")] + by[(scope, "error")] + by[(scope, "xpass")]
        lines.append(f"| {scope} ({total}) | {by[(scope, 'pass')] + by[(scope, 'xfail')]} | "
                     f"{by[(scope, 'skip')]} | {bad} |")
    lines.append("")
    lines.append("| skipped | category | reason |")
    lines.append("|---|---|---|")
    for (scope, cat, note), n in sorted(reasons.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1:])):
        lines.append(f"| {n} | {cat} | {note.replace('|', '/')} |")
    return "\n".join(lines), by


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    ap.add_argument("--rdmasan", required=True, help="the rdmasan CLI")
    ap.add_argument("--softnic", choices=("auto", "on", "off"),
                    help="pass --softnic=MODE to rdmasan run (default: none, as users type it)")
    ap.add_argument("--port", choices=("ib", "roce"), default="ib",
                    help="softnic's port: InfiniBand or RoCE (softnic_port=)")
    ap.add_argument("--expected", help="expected outcomes (default: pyverbs_expected.txt for ib, "
                    "pyverbs_expected_roce.txt for roce)")
    ap.add_argument("--other-expected", help="the other port's expected outcomes, where every "
                    "link-layer skip must be a pass (default: the other port's file)")
    ap.add_argument("--work", required=True, help="folder for the suite copy, logs and results")
    ap.add_argument("--source", default=SUITE_SOURCE, help="the suite as the package installs it")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=180, help="seconds per test")
    ap.add_argument("--only", help="regular expression: run only the tests it matches")
    ap.add_argument("--write-expected", metavar="FILE",
                    help="write today's outcomes as an expected-outcomes file and compare nothing")
    args = ap.parse_args()
    files = {"ib": "pyverbs_expected.txt", "roce": "pyverbs_expected_roce.txt"}
    if not args.expected:
        args.expected = os.path.join(HERE, files[args.port])
    if not args.other_expected:
        args.other_expected = os.path.join(HERE, files["roce" if args.port == "ib" else "ib"])
    args.rdmasan = os.path.abspath(args.rdmasan)  # each test runs in a folder of its own
    args.work = os.path.abspath(args.work)

    if not os.path.isdir(args.source):
        print(f"pyverbs_runner: {args.source} is missing: install python3-pyverbs (scripts/setup.sh)",
              file=sys.stderr)
        return 1
    if subprocess.run([PYTHON, "-c", "import pyverbs.device"], capture_output=True).returncode != 0:
        print(f"pyverbs_runner: {PYTHON} cannot import pyverbs: install python3-pyverbs (scripts/setup.sh)",
              file=sys.stderr)
        return 1
    os.makedirs(args.work, exist_ok=True)
    if os.path.isdir(os.path.join(args.work, "logs")):
        shutil.rmtree(os.path.join(args.work, "logs"))
    suite = prepare_suite(args.source, os.path.join(args.work, "suite", "tests"))
    tests = list_tests(suite)
    if args.only:
        tests = [t for t in tests if re.search(args.only, t)]
    expected = None
    other = Expected(args.other_expected) if os.path.exists(args.other_expected) else None
    args.other_passes = frozenset(t for t, o in (other.outcomes.items() if other else ()) if o[0] == "pass")
    if not args.write_expected:
        if other is None:
            print(f"pyverbs_runner: {args.other_expected} is missing", file=sys.stderr)
            return 1
        expected = Expected(args.expected)
        errors = expected.errors + other.errors
        # A link-layer skip here is honest only if the other port runs it.
        for tid, (outcome, category, _) in expected.outcomes.items():
            if category == "link-layer" and other.outcomes.get(tid, ("",))[0] != "pass":
                errors.append(f"{args.expected}: {tid} is a link-layer skip, but "
                              f"{os.path.basename(args.other_expected)} does not say it passes there")
        if errors:
            print("\n".join(errors), file=sys.stderr)
            return 1

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, args, suite, i, t) for i, t in enumerate(tests)]
        results = [f.result() for f in futures]
    elapsed = time.monotonic() - start
    with open(os.path.join(args.work, "results.jsonl"), "w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    if args.write_expected:
        write_expected(args.write_expected, results)
        print(f"pyverbs_runner: wrote {args.write_expected} ({len(results)} tests, {elapsed:.0f} s)")
        return 0

    problems = []
    seen = set()
    for r in results:
        seen.add(r["id"])
        exp = expected.outcomes.get(r["id"])
        got = (r["outcome"], r["category"])
        if exp is None:
            problems.append(f"{r['id']}: {r['outcome']} {r['category']} {r['detail']} "
                            f"(not in {os.path.basename(args.expected)})")
        elif got != exp[:2]:
            want = exp[0] + (f" {exp[1]}" if exp[1] else "")
            problems.append(f"{r['id']}: {r['outcome']}{' ' + r['category'] if r['category'] else ''}"
                            f"{': ' + r['detail'] if r['detail'] else ''} (expected {want}); "
                            f"logs: {args.work}/logs")
        checks = sorted({c for c, _ in r["findings"]})
        for check in checks:
            if (r["id"], check) not in expected.findings:
                first = next(text for c, text in r["findings"] if c == check)
                problems.append(f"{r['id']}: unclassified rdmasan finding {check}: {first}")
        for (tid, check) in expected.findings:
            if tid == r["id"] and check not in checks:
                problems.append(f"{r['id']}: expected rdmasan finding {check} was not reported")
    if not args.only:
        for tid in expected.outcomes:
            if tid not in seen:
                problems.append(f"{tid}: in {os.path.basename(args.expected)} but not in the suite")

    text, by = table(results, expected)
    with open(os.path.join(args.work, "table.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text)
    nfind = sum(len({c for c, _ in r["findings"]}) for r in results)
    print(f"\npyverbs_runner: {len(results)} tests in {elapsed:.0f} s; generic: "
          f"{by[('generic', 'pass')]} pass, {by[('generic', 'skip')]} skip, "
          f"{by[('generic', 'fail')] + by[('generic', 'error')]} fail/error; "
          f"{nfind} (test, check) findings, each classified in {os.path.basename(args.expected)}")
    if problems:
        print(f"\npyverbs_runner: {len(problems)} unexpected:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print("pyverbs_runner: every outcome as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())

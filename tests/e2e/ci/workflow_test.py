#!/usr/bin/env python3
"""workflow_test.py: the CI examples of examples/ci/ are valid YAML, have the
steps examples/ci/README.md describes, and their rdmasan-tests.sh command line
works: it is run as written (options, --out), with this build's rdmasan and
ibv_devinfo as the only test command.

usage: workflow_test.py EXAMPLES_CI_DIR RDMASAN OUTDIR
"""
import os
import shlex
import subprocess
import sys

import yaml

ci_dir, rdmasan, outdir = (os.path.abspath(a) for a in sys.argv[1:4])
script = os.path.join(ci_dir, "rdmasan-tests.sh")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def run_invocation(name, line, workspace_var):
    """Runs the example's rdmasan-tests.sh line; returns its --out folder."""
    work = os.path.join(outdir, "ci_example.workflow", name)
    os.makedirs(work, exist_ok=True)
    line = line.replace('"$%s/"' % workspace_var, work + "/")
    words = shlex.split(line)
    check(words[0] == "ci/rdmasan-tests.sh", "%s: runs %s, not ci/rdmasan-tests.sh" % (name, words[0]))
    check("--" in words, "%s: no '--' before the test commands" % name)
    opts = words[1 : words.index("--")] if "--" in words else words[1:]
    check("--out" in opts, "%s: no --out" % name)
    out = opts[opts.index("--out") + 1] if "--out" in opts else "rdmasan-out"
    cmd = [script, "--rdmasan", rdmasan] + opts + ["--", "ibv_devinfo"]
    print("+ (in %s) %s" % (work, shlex.join(cmd)))
    r = subprocess.run(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    print(r.stdout)
    check(r.returncode == 0, "%s: its rdmasan-tests.sh line exits %d over ibv_devinfo" % (name, r.returncode))
    check(os.path.isfile(os.path.join(work, out, "rdmasan.sarif")), "%s: no %s/rdmasan.sarif" % (name, out))
    return out


# GitHub Actions
with open(os.path.join(ci_dir, "github-actions.yml")) as f:
    gh = yaml.safe_load(f)
on = gh.get("on", gh.get(True))  # YAML 1.1 reads the key `on` as true
check(on is not None, "github-actions.yml: no 'on' triggers")
jobs = gh.get("jobs", {})
check(len(jobs) == 1, "github-actions.yml: wants one job, has %d" % len(jobs))
job = next(iter(jobs.values()))
check(job.get("container", {}).get("image") == "debian:12", "github-actions.yml: not in a debian:12 container")
check(gh.get("permissions", {}).get("security-events") == "write", "github-actions.yml: no security-events: write")
steps = job.get("steps", [])
runs = [s.get("run", "") for s in steps]
check(any("ibverbs-utils" in r for r in runs), "github-actions.yml: does not install ibverbs-utils")
check(any("apt-get install -y /tmp/rdmasan" in r for r in runs), "github-actions.yml: does not install the .deb")
tests = [r for r in runs if "rdmasan-tests.sh" in r]
check(len(tests) == 1, "github-actions.yml: wants one step running rdmasan-tests.sh, has %d" % len(tests))
out = run_invocation("github", tests[0], "GITHUB_WORKSPACE") if tests else "rdmasan-out"
uploads = [s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@")]
check(len(uploads) == 1, "github-actions.yml: wants one upload-sarif step, has %d" % len(uploads))
for u in uploads:
    check(u.get("if") == "always()", "github-actions.yml: upload-sarif without if: always()")
    check(u.get("with", {}).get("sarif_file") == out + "/rdmasan.sarif",
          "github-actions.yml: upload-sarif's sarif_file is not %s/rdmasan.sarif" % out)

# GitLab CI (optional)
gl_path = os.path.join(ci_dir, "gitlab-ci.yml")
if os.path.exists(gl_path):
    with open(gl_path) as f:
        gl = yaml.safe_load(f)
    job = gl.get("rdmasan", {})
    check(job.get("image") == "debian:12", "gitlab-ci.yml: not on debian:12")
    lines = [l for l in job.get("script", []) if "rdmasan-tests.sh" in l]
    check(len(lines) == 1, "gitlab-ci.yml: wants one rdmasan-tests.sh line, has %d" % len(lines))
    out = run_invocation("gitlab", lines[0], "CI_PROJECT_DIR") if lines else "rdmasan-out"
    check(job.get("artifacts", {}).get("when") == "always", "gitlab-ci.yml: artifacts not kept always")
    check(any(p.rstrip("/") == out for p in job.get("artifacts", {}).get("paths", [])),
          "gitlab-ci.yml: %s not kept as an artifact" % out)

if failures:
    print("FAIL: ci_example.workflow: %d check(s) failed" % len(failures))
    sys.exit(1)
print("PASS: ci_example.workflow")

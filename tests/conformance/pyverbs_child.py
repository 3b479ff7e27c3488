#!/usr/bin/python3
# pyverbs_child.py: run named tests of rdma-core's pyverbs suite in this
# process and write one JSON line per test outcome.
#
# Runs under `rdmasan run` (pyverbs_runner.py starts it); imports the suite
# the way its own run_tests.py does (the folder holding __init__.py becomes
# the package `tests`).  It records what unittest decided and nothing more:
# pass, fail or error (with the traceback's last line), skip (with the
# reason), expected failure.  It may not change what a test does.
#
# usage: pyverbs_child.py SUITE_DIR RESULT_FILE TEST_ID...
#        pyverbs_child.py SUITE_DIR --list      (every test id, one a line)
import json
import os
import sys
import unittest
from importlib.machinery import SourceFileLoader


def last_line(err_text):
    lines = [ln for ln in err_text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


class Recorder(unittest.TestResult):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def _put(self, test, outcome, detail=""):
        rec = {"id": test.id(), "outcome": outcome, "detail": detail}
        self.out.write(json.dumps(rec) + "\n")
        self.out.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._put(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._put(test, "fail", last_line(self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        super().addError(test, err)
        # An error in setUpClass is reported against a _ErrorHolder.
        self._put(test, "error", last_line(self._exc_info_to_string(err, test)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._put(test, "skip", str(reason))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._put(test, "xfail", last_line(self._exc_info_to_string(err, test)))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._put(test, "xpass")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            outcome = "fail" if issubclass(err[0], test.failureException) else "error"
            self._put(test, outcome, last_line(self._exc_info_to_string(err, test)))


def main():
    if len(sys.argv) == 3 and sys.argv[2] == "--list":
        pass
    elif len(sys.argv) < 4:
        sys.stderr.write("usage: pyverbs_child.py SUITE_DIR RESULT_FILE TEST_ID...\n")
        return 2
    suite_dir, result_file, ids = sys.argv[1], sys.argv[2], sys.argv[3:]
    sys.path.insert(0, suite_dir)
    from args_parser import parser  # the suite's own option parser

    sys.argv[1:] = []
    parser.parse_args()
    pkg = SourceFileLoader("tests", os.path.join(suite_dir, "__init__.py")).load_module()
    loader = unittest.TestLoader()
    if result_file == "--list":
        for mod in pkg.__test_modules__:
            for case in loader.loadTestsFromModule(mod):
                for test in case:
                    print(test.id().removeprefix("tests."))
        return 0
    with open(result_file, "a", encoding="utf-8") as out:
        result = Recorder(out)
        for test_id in ids:
            try:
                suite = loader.loadTestsFromName(test_id, pkg)
            except Exception as exc:  # the name does not resolve
                out.write(json.dumps({"id": test_id, "outcome": "error",
                                      "detail": f"cannot load: {exc}"}) + "\n")
                continue
            suite.run(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

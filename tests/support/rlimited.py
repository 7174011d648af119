"""`python -m tests.support.rlimited N MODULE ARGS...`: run `python -m MODULE ARGS...` with
RLIMIT_NOFILE (soft and hard) set to N, for the tests of a process short of descriptors."""

from __future__ import annotations

import resource
import runpy
import sys


def main() -> None:
    limit, module, *args = sys.argv[1:]
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(limit), int(limit)))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

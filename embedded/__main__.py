"""`python -m embedded`: until the services land, say what exists."""

import sys


def main() -> int:
    print("embedded default: services are not wired yet; see README.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
